/*
 * common.glsl - what every compute shader of the Vulkan backend shares.
 *
 * Binding convention (one descriptor set layout serves every pipeline, so
 * encoding never switches layouts): 0, 1, 2 are the node's sources, 3 is
 * the destination, 4 is the compute's status words (in-kernel data errors,
 * e.g. an out-of-range get_rows index), 5 a scratch a fused kernel reads
 * and writes, 6 a fourth source. A binding starts at the storage
 * offset alignment at or below the tensor; the tensor's first element sits
 * `o*` elements further in, passed as a push constant. Strides are element
 * strides (byte strides divided by the element size, on the host), so any
 * view, permute or transpose is read in place.
 *
 * Grids wider than 65535 workgroups fold into y: wg_linear() undoes it.
 *
 * Progress: every kernel's push constants end with the node it runs for
 * (tsl_node, node index + 1, at offset 124), and its first invocation of
 * workgroup (0, 0, 0) raises the compute's progress word (status word 8)
 * to it before anything else (TSL_PROGRESS() opens every main). Levels of
 * dispatches run in order, so after a hang or a device loss the word names
 * the last level any kernel started: the host reads it from the mapped
 * status words, which stay readable when the device does not. One atomic
 * per dispatch, into host memory the kernel does not wait on: no
 * measurable cost (8B decode on the H200, bench/RESULTS.md run 57), where
 * an NV checkpoint at every level cost 13% of the token.
 */

#extension GL_EXT_control_flow_attributes : enable

uint wg_linear() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }

layout(binding = 4) buffer TslStatus { uint tsl_status_words[]; };
#define TSL_PROGRESS_WORD 8u
/* A data error (an index out of range): the first invocation to see one
 * claims words 0-3 with the node, the bad value and where it was read;
 * the host fails the compute naming them. */
#define TSL_INDEX_ERROR(node, value, at)                                  \
    if (atomicCompSwap(tsl_status_words[0], 0u, 1u) == 0u) {              \
        tsl_status_words[1] = (node);                                      \
        tsl_status_words[2] = (value);                                     \
        tsl_status_words[3] = (at);                                        \
    }
#define TSL_PROGRESS()                                                                    \
    if (gl_LocalInvocationIndex == 0u && gl_WorkGroupID == uvec3(0u) && pc.tsl_node != 0u) \
    atomicMax(tsl_status_words[TSL_PROGRESS_WORD], pc.tsl_node)

/* A producer a product waits on (vk_backend.c, vk_wait_edge): once the whole
 * workgroup is done, every invocation's stores fenced at device scope, one
 * invocation counts the workgroup into word `at` of buffer array Q (a
 * coherent binding). at 0: no product waits. Reached by the whole
 * workgroup (its barrier); at is uniform. */
#define TSL_COUNT_IN(Q, at)                                \
    if ((at) != 0u) {                                      \
        memoryBarrierBuffer();                             \
        barrier();                                         \
        if (gl_LocalInvocationIndex == 0u) atomicAdd(Q[at], 1u); \
    }

