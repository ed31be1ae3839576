/*
 * vk_no_vulkan.h - the whole program of a Vulkan test in a build without the
 * Vulkan backend (no loader headers or glslc at build time): nothing to
 * test, which passes, unless TSL_REQUIRE_VULKAN (CI) demands a backend.
 * Included in place of the test under #ifndef TSL_HAVE_VULKAN.
 */
#ifndef TSL_TEST_VK_NO_VULKAN_H
#define TSL_TEST_VK_NO_VULKAN_H

#include <stdio.h>
#include <stdlib.h>

int main(void) {
    if (getenv("TSL_REQUIRE_VULKAN")) {
        fprintf(stderr, "FAIL: this build has no Vulkan backend and TSL_REQUIRE_VULKAN is set\n");
        return 1;
    }
    printf("skipped: this build has no Vulkan backend\n");
    return 0;
}

#endif
