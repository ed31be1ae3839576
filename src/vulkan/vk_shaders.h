/*
 * vk_shaders.h - the SPIR-V embedded in the library at build time.
 *
 * vulkan.cmake compiles every kernel variant with glslc and writes one
 * generated C file holding each as an array of 32-bit words (the form
 * vkCreateShaderModule takes), with this table naming them. Kernels are looked
 * up by name, so the build's order does not matter, and a kernel whose SPIR-V
 * is missing from a build fails to build like any other (FAILED, named).
 */
#ifndef TSL_VK_SHADERS_H
#define TSL_VK_SHADERS_H

#include <stddef.h>
#include <stdint.h>

typedef struct vk_shader_blob {
    const char *name;     /* kernel name, e.g. "mul_mat_q4_0_f32" */
    const uint32_t *code; /* SPIR-V words */
    size_t size;          /* bytes */
} vk_shader_blob;

extern const vk_shader_blob vk_shader_blobs[];
extern const size_t vk_shader_blob_count;

#endif /* TSL_VK_SHADERS_H */
