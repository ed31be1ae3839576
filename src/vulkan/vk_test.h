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

/* The levels of dispatches (each after a barrier, or the first) of the
 * last compute's command buffer s: the first node of each in first[] and
 * its last in last[], at most cap of them. They are what a hang or a device
 * loss is placed in (the progress word, common.glsl). Returns how many
 * there are, or -1 (no such command buffer, or not a Vulkan backend). */
int vk_test_levels(tsl_backend *be, int s, int *first, int *last, int cap);
/* The last node any kernel of the backend's latest compute started (its
 * progress word), -1 for none; -1 for a backend not Vulkan. */
int vk_test_progress(tsl_backend *be);

/* The backend's waits (a product dispatched beside the kernel that makes
 * its column, waiting on its signal instead of a barrier): sets the edges
 * (mask: 1 norms, 2 swiglu, 4 attention; 0 none; -1 leaves them) and, with
 * skew > 0, makes the next wait recorded ask for skew signals more than its
 * producer gives, so that it runs past its bound. Returns the mask before,
 * or -1 for a backend not Vulkan. */
int vk_test_wait(tsl_backend *be, int mask, uint32_t skew);

#endif /* TSL_VK_TEST_H */
