/*
 * vk_ops_mm.c - mul_mat on the Vulkan backend: which kernel serves a node
 * (mat-vec for one column, tiled otherwise) and its push constants and grid.
 *
 * Split from vk_ops.c so the matrix kernels (the ones that decide the speed
 * of a model) can grow variants (cooperative matrices, wider mat-vec) with
 * their list in vk_kernels_mm.h and kernels_mm.cmake, without touching the
 * element-wise ops. The rules match the CPU backend's mul_mat: a [K, M]
 * times b [K, N] -> [M, N], batches of b broadcast over a's.
 */
#include <string.h>

#include "vulkan/vk.h"

bool vk_mm_kernel(int kernel) {
    switch (kernel) {
#define VK_MM_CASE(id, name, e0, e1, e2, e3) case VK_K_##id:
        VK_KERNELS_MM(VK_MM_CASE)
#undef VK_MM_CASE
        return true;
    default: return false;
    }
}

static bool vk_mm_is_vec(int kernel) {
    return kernel == VK_K_MUL_MAT_VEC_F32 || kernel == VK_K_MUL_MAT_VEC_F16 || kernel == VK_K_MUL_MAT_VEC_Q8_0 ||
           kernel == VK_K_MUL_MAT_VEC_Q4_0;
}

int vk_mm_candidates(const vk_device *d, const tsl_tensor *n, int cand[VK_MAX_CAND]) {
    const tsl_tensor *a = n->src[0], *b = n->src[1];
    if (!b || !vk_table_type(a->type) || !vk_is_f32(b) || !vk_is_f32(n) || n->nb[0] != sizeof(float)) return 0;
    if (a->nb[0] != tsl_type_block_size(a->type) || a->ne[0] != b->ne[0]) return 0;
    if (tsl_type_is_quantized(a->type) && a->ne[0] % tsl_type_block_len(a->type) != 0) return 0;
    if (a->ne[2] <= 0 || a->ne[3] <= 0 || b->ne[2] % a->ne[2] != 0 || b->ne[3] % a->ne[3] != 0) return 0;
    if (n->ne[0] != a->ne[1] || n->ne[1] != b->ne[1] || n->ne[2] != b->ne[2] || n->ne[3] != b->ne[3]) return 0;
    if ((uint64_t)b->ne[2] * (uint64_t)b->ne[3] > d->props.limits.maxComputeWorkGroupCount[2]) return 0;
    int tiled = a->type == TSL_TYPE_F32 ? VK_K_MUL_MAT_F32 : a->type == TSL_TYPE_F16 ? VK_K_MUL_MAT_F16
              : a->type == TSL_TYPE_Q8_0 ? VK_K_MUL_MAT_Q8_0 : VK_K_MUL_MAT_Q4_0;
    int vec = a->type == TSL_TYPE_F32 ? VK_K_MUL_MAT_VEC_F32 : a->type == TSL_TYPE_F16 ? VK_K_MUL_MAT_VEC_F16
            : a->type == TSL_TYPE_Q8_0 ? VK_K_MUL_MAT_VEC_Q8_0 : VK_K_MUL_MAT_VEC_Q4_0;
    int k = 0;
    if (b->ne[1] == 1) cand[k++] = vec;
    cand[k++] = tiled;
    return k;
}

uint32_t vk_mm_params(const vk_device *d, const vk_exec *x, uint32_t pc[VK_PC_WORDS], uint32_t grid[3]) {
    const tsl_tensor *n = x->node, *a = n->src[0], *b = n->src[1];
    const uint8_t *es = vk_kernel_descs[x->kernel].esize;
    uint32_t *p = pc;
    memset(pc, 0, VK_PC_WORDS * sizeof *pc);
    const int64_t M = a->ne[1], N = b->ne[1], K = a->ne[0];
    *p++ = vk_u32(M);
    *p++ = vk_u32(N);
    *p++ = vk_u32(K);
    p = vk_put_strides(p, a, es[0], 1);
    p = vk_put_strides(p, b, 4, 0);
    p = vk_put_strides(p, n, 4, 1);
    *p++ = vk_u32(b->ne[2] / a->ne[2]);
    *p++ = vk_u32(b->ne[3] / a->ne[3]);
    *p++ = vk_u32(b->ne[2]);
    *p++ = x->b[0].eoff;
    *p++ = x->b[1].eoff;
    *p++ = x->b[3].eoff;
    uint64_t batches = (uint64_t)b->ne[2] * (uint64_t)b->ne[3];
    if (vk_mm_is_vec(x->kernel)) {
        vk_grid(d, ((uint64_t)M + 1) / 2, grid); /* MV_ROWS = 2 */
    } else {
        grid[0] = (uint32_t)((M + 63) / 64);
        grid[1] = (uint32_t)((N + 63) / 64);
    }
    grid[2] = (uint32_t)batches;
    return (uint32_t)((p - pc) * sizeof *pc);
}
