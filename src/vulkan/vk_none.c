/*
 * vk_none.c - the Vulkan entry points of a library built without Vulkan
 * (no loader headers or no glslc at build time; see vulkan.cmake).
 *
 * Everything answers as a machine with no Vulkan device would: no devices,
 * and a backend that cannot be made, with a record saying why and what to
 * install. Callers (the CLI, tests, the scheduler's setup) need no #ifdefs.
 */
#include <stdio.h>

#include "core/core.h"
#include "tensile/backend.h"
#include "vulkan/vk_test.h"

static tsl_status vk_none(tsl_error *err, const char *what) {
    error_set(err, TSL_FAILED, "vulkan", "", -1, NULL, NULL, "%s: this build has no Vulkan backend", what);
    if (err) snprintf(err->hint, sizeof err->hint, "install libvulkan-dev and glslc, then rebuild");
    return TSL_FAILED;
}

int tsl_vulkan_device_count(void) { return 0; }

tsl_status tsl_vulkan_device_info_get(int index, tsl_vulkan_device_info *info, tsl_error *err) {
    return vk_none(err, "vulkan_device_info");
}

tsl_backend *tsl_backend_vulkan_new(int device_index, tsl_error *err) {
    vk_none(err, "backend_vulkan_new");
    return NULL;
}

bool tsl_backend_is_vulkan(const tsl_backend *be) { return false; }

tsl_status tsl_backend_vulkan_info(const tsl_backend *be, tsl_vulkan_device_info *info, tsl_error *err) {
    return vk_none(err, "backend_vulkan_info");
}

tsl_status tsl_backend_vulkan_set_command_buffers(tsl_backend *be, int n, tsl_error *err) {
    return vk_none(err, "backend_vulkan_set_command_buffers");
}

void tsl_backend_vulkan_set_watchdog_ms(tsl_backend *be, int ms) {}

void tsl_backend_vulkan_set_reuse(tsl_backend *be, bool on) {}

tsl_status tsl_backend_vulkan_stats(const tsl_backend *be, tsl_vulkan_stats *out) { return TSL_FAILED; }

tsl_status vk_test_set_kernel(tsl_backend *be, const char *name, const uint32_t *spv, size_t size, const char *entry,
                              tsl_error *err) {
    return vk_none(err, "vk_test_set_kernel");
}

int vk_test_levels(tsl_backend *be, int s, int *first, int *last, int cap) { return -1; }

int vk_test_progress(tsl_backend *be) { return -1; }

int vk_test_wait(tsl_backend *be, int mask, uint32_t skew) { return -1; }

const uint32_t *vk_test_kernel_spirv(const char *name, size_t *size) {
    if (size) *size = 0;
    return NULL;
}
