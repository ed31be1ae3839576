/*
 * vk_test.h - hooks into the Vulkan backend for its tests, in plain C types
 * (no Vulkan headers), so the tests build the same with or without Vulkan.
 * Nothing outside tests/vulkan calls these.
 */
#ifndef TSL_VK_TEST_H
#define TSL_VK_TEST_H

#include <stddef.h>
#include <stdint.h>

#include "tensile/backend.h"

/* Replace the SPIR-V and entry point that kernel `name` is built from on the
 * backend's device, dropping a pipeline already built and a cached failure,
 * so a test can register a kernel the driver refuses (e.g. an entry point the
 * module does not have). spv NULL keeps the embedded SPIR-V; entry NULL
 * means "main". Call it while no work using that kernel is in flight (the
 * pipeline is destroyed at once). Returns FAILED for an unknown kernel name. */
tsl_status vk_test_set_kernel(tsl_backend *be, const char *name, const uint32_t *spv, size_t size,
                              const char *entry, tsl_error *err);
/* The embedded SPIR-V words of kernel name (size in bytes), or NULL. */
const uint32_t *vk_test_kernel_spirv(const char *name, size_t *size);

/* Where the last compute put its NV checkpoints in command buffer s (placed
 * whether or not the device records them): for each, the node it names in
 * first[] and the last node of its span (the nodes up to the next one) in
 * last[], at most cap of them. Returns how many there are, or -1 (no such
 * command buffer, or not a Vulkan backend). */
int vk_test_checkpoints(tsl_backend *be, int s, int *first, int *last, int cap);

#endif /* TSL_VK_TEST_H */
