/*
 * vk_harness.h - what every Vulkan test program needs before its first
 * backend: finding a device (pointing the loader at Mesa's lavapipe on a
 * machine with no driver configured, as CI is) and watching whether the
 * Khronos validation layer really loaded (from the library's own log line,
 * so TSL_REQUIRE_VULKAN can insist on it). Header-only, static functions:
 * each test program includes it once.
 */
#ifndef TSL_TEST_VK_HARNESS_H
#define TSL_TEST_VK_HARNESS_H

#include <glob.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensile/backend.h"

/* Usable Vulkan devices; with none and no driver named in the environment,
 * lavapipe where it is installed. */
static inline int vkh_devices(void) {
    int n = tsl_vulkan_device_count();
    if (n > 0 || getenv("VK_ICD_FILENAMES") || getenv("VK_DRIVER_FILES")) return n;
    glob_t gl;
    if (glob("/usr/share/vulkan/icd.d/lvp_icd*.json", 0, NULL, &gl) == 0 && gl.gl_pathc > 0) {
        setenv("VK_DRIVER_FILES", gl.gl_pathv[0], 1);
        setenv("VK_ICD_FILENAMES", gl.gl_pathv[0], 1);
        n = tsl_vulkan_device_count();
    }
    globfree(&gl);
    return n;
}

static inline bool vkh_env_on(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* Set by vkh_log from the library's lines about the layer. */
static atomic_int vkh_layer_on, vkh_layer_missing;

/* A log sink (tsl_log_set(vkh_log, NULL)): lines at WARN and above go to
 * stderr as by default; the layer's loading is noted. */
static inline void vkh_log(tsl_log_level level, const char *line, void *user) {
    (void)user;
    if (strstr(line, "validation layer on")) atomic_store(&vkh_layer_on, 1);
    if (strstr(line, "validation layer is not installed")) atomic_store(&vkh_layer_missing, 1);
    if (level >= TSL_LOG_WARN) fprintf(stderr, "tensile: %s\n", line);
}

/* Did the layer load (asked for and not missing)? */
static inline bool vkh_layer_loaded(void) {
    return atomic_load(&vkh_layer_on) && !atomic_load(&vkh_layer_missing);
}

#endif /* TSL_TEST_VK_HARNESS_H */
