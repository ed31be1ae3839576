/*
 * vk.h - private interface of the Vulkan backend, shared by its files:
 *
 *   vk_device.c    instance, device selection and features, the registry of
 *                  devices shared by backends, device loss (the latch) and
 *                  what the driver says about it
 *   vk_memory.c    the sub-allocator over large VkDeviceMemory blocks,
 *                  staging copies for tensor set/get
 *   vk_pipeline.c  the kernel table, building pipelines on first use, the
 *                  failure cache
 *   vk_ops.c       which kernel serves a node, its push constants and grid
 *   vk_backend.c   the backend: resolve pass, parallel encoding into command
 *                  buffers, submission, completion with a watchdog
 *
 * Object lifetimes. A vk_device is one VkDevice on one physical device,
 * shared by every backend made for that device (refcounted through the
 * registry), so a loss latches for all of them and kernels are built once.
 * A backend owns its command pools, fences, worker threads and staging
 * buffer; buffers are carved out of the device's memory blocks. Recovery
 * replaces the VkDevice inside the same vk_device (its generation, gen,
 * counts the replacements); what was made on the old one waits in a grave
 * until it is provably idle.
 */
#ifndef TSL_VK_H
#define TSL_VK_H

#include <pthread.h>
#include <stdatomic.h>
#include <vulkan/vulkan.h>

#include "backend/backend_impl.h"
#include "core/core.h"
#include "fault/fault.h"
#include "vulkan/vk_kernels_mm.h"
#include "vulkan/vk_shaders.h"
#include "vulkan/vk_test.h"

#define VK_MAX_CB 9      /* command buffers per compute: the caller's and 8 workers' */
#define VK_MAX_WORKERS 8
#define VK_NBIND 7       /* bindings: src0, src1, src2, dst, status words, a scratch (vk_exec.bx), a 4th source (vk_exec.by) */
#define VK_BIND_DST 3
#define VK_BIND_STATUS 4
#define VK_BIND_X 5
#define VK_BIND_Y 6
#define VK_PC_WORDS 32   /* 128 bytes: the push-constant size every device has */
#define VK_PC_NODE 31    /* the last word: the node + 1 a dispatch runs for (the progress word, common.glsl) */
/* The word of a producer's push constants that names its signal word (0:
 * none), which vk_wait_edge (vk_backend.c) fills in once a product waits on
 * it: rms_norm_mul's, swiglu_q's (eltwise.comp) and attn_dec1's `sync` */
#define VK_PC_RMS_SIGNAL 19
#define VK_PC_SWIGLU_SIGNAL 26
#define VK_PC_ATTN1_SIGNAL 30
#define VK_SW_PROGRESS 8 /* status word: the last node + 1 any kernel of the compute started */
#define VK_MAX_DEVICES 16
#define VK_ALIGN 256     /* tensor placement alignment of Vulkan buffers */

/* ---- kernels --------------------------------------------------------------
 * X(id, name, esize of binding 0, 1, 2, 3): the element size each binding is
 * read with (bytes; 2 for block formats and for the opaque units of the
 * same-type copies and concat, read as 16-bit words; 1 for i8; 0 unused).
 * The names match the SPIR-V variants vulkan.cmake compiles. */
#define VK_KERNELS(X)                                         \
    VK_KERNELS_MM(X)                                          \
    X(ADD_F32, "add_f32", 4, 4, 0, 4)                         \
    X(SUB_F32, "sub_f32", 4, 4, 0, 4)                         \
    X(MUL_F32, "mul_f32", 4, 4, 0, 4)                         \
    X(DIV_F32, "div_f32", 4, 4, 0, 4)                         \
    X(SWIGLU_F32, "swiglu_f32", 4, 4, 0, 4)                   \
    X(SWIGLU_Q_F32, "swiglu_q_f32", 4, 4, 0, 4)               \
    X(SCALE_F32, "scale_f32", 4, 0, 0, 4)                     \
    X(SQR_F32, "sqr_f32", 4, 0, 0, 4)                         \
    X(SQRT_F32, "sqrt_f32", 4, 0, 0, 4)                       \
    X(SILU_F32, "silu_f32", 4, 0, 0, 4)                       \
    X(GELU_F32, "gelu_f32", 4, 0, 0, 4)                       \
    VK_KERNELS_CPY(X)                                         \
    X(GET_ROWS_F32, "get_rows_f32", 4, 4, 0, 4)               \
    X(SET_ROWS_F32, "set_rows_f32", 4, 4, 0, 4)               \
    X(SET_ROWS_F16, "set_rows_f16", 4, 4, 0, 2)               \
    X(GET_ROWS_F16, "get_rows_f16", 2, 4, 0, 4)               \
    X(GET_ROWS_BF16, "get_rows_bf16", 2, 4, 0, 4)             \
    X(GET_ROWS_Q8_0, "get_rows_q8_0", 2, 4, 0, 4)             \
    X(GET_ROWS_Q4_0, "get_rows_q4_0", 2, 4, 0, 4)             \
    X(RMS_NORM_F32, "rms_norm_f32", 4, 0, 0, 4)               \
    X(NORM_F32, "norm_f32", 4, 0, 0, 4)                       \
    X(SUM_F32, "sum_f32", 4, 0, 0, 4)                         \
    X(SUM_ROWS_F32, "sum_rows_f32", 4, 0, 0, 4)               \
    X(QUANTIZE_Q8_F32, "quantize_q8_f32", 0, 4, 0, 4)         \
    X(RMS_NORM_MUL_F32, "rms_norm_mul_f32", 4, 4, 0, 4)       \
    X(RMS_NORM_MUL_W8K_F32, "rms_norm_mul_w8k_f32", 4, 4, 0, 4) \
    X(MEAN_F32, "mean_f32", 4, 0, 0, 4)                       \
    X(ARGMAX_F32, "argmax_f32", 4, 0, 0, 4)                   \
    X(CROSS_ENTROPY_LOSS_F32, "cross_entropy_loss_f32", 4, 4, 0, 4) \
    X(SOFT_MAX_F32, "soft_max_f32", 4, 0, 0, 4)               \
    X(SOFT_MAX_F32_MASK_F32, "soft_max_f32_mask_f32", 4, 4, 0, 4) \
    X(SOFT_MAX_F32_MASK_F16, "soft_max_f32_mask_f16", 4, 2, 0, 4) \
    X(ATTN_DEC_F16, "attn_dec_f16", 2, 4, 0, 4)               \
    X(ATTN_DEC_F16_MASK_F32, "attn_dec_f16_mask_f32", 2, 4, 4, 4) \
    X(ATTN_DEC_F16_MASK_F16, "attn_dec_f16_mask_f16", 2, 4, 2, 4) \
    X(ATTN_DEC1_F16, "attn_dec1_f16", 2, 4, 0, 4)             \
    X(ATTN_DEC1_F16_MASK_F32, "attn_dec1_f16_mask_f32", 2, 4, 4, 4) \
    X(ATTN_DEC1_F16_MASK_F16, "attn_dec1_f16_mask_f16", 2, 4, 2, 4) \
    X(ATTN_COMBINE_F32, "attn_combine_f32", 4, 0, 0, 4)       \
    X(ATTN_COMBINE_Q_F32, "attn_combine_q_f32", 4, 0, 4, 4)   \
    X(ROPE_F32, "rope_f32", 4, 4, 4, 4)                       \
    X(ROPE_F32_FP32, "rope_f32_fp32", 4, 4, 4, 4)             \
    X(ROPE_SET_ROWS_F16, "rope_set_rows_f16", 4, 4, 4, 2)     \
    X(ROPE_NORM_F32, "rope_norm_f32", 4, 4, 4, 4)             \
    X(ROPE_NORM_F32_FP32, "rope_norm_f32_fp32", 4, 4, 4, 4)   \
    X(ROPE_NORM_SET_ROWS_F16, "rope_norm_set_rows_f16", 4, 4, 4, 2) \
    X(OUT_PROD_F32, "out_prod_f32_f32", 4, 4, 0, 4)           \
    X(OUT_PROD_F16, "out_prod_f16_f32", 2, 4, 0, 4)           \
    X(OUT_PROD_BF16, "out_prod_bf16_f32", 2, 4, 0, 4)         \
    X(OUT_PROD_Q8_0, "out_prod_q8_0_f32", 2, 4, 0, 4)         \
    X(OUT_PROD_Q4_0, "out_prod_q4_0_f32", 2, 4, 0, 4)         \
    X(CONCAT_F32, "concat_f32", 2, 2, 0, 2)                   \
    X(CONCAT_I32, "concat_i32", 2, 2, 0, 2)                   \
    X(CONCAT_F16, "concat_f16", 2, 2, 0, 2)                   \
    X(CONCAT_BF16, "concat_bf16", 2, 2, 0, 2)                 \
    X(CONCAT_I16, "concat_i16", 2, 2, 0, 2)                   \
    X(CONCAT_I64, "concat_i64", 2, 2, 0, 2)                   \
    X(CONCAT_F64, "concat_f64", 2, 2, 0, 2)                   \
    X(CONCAT_I8, "concat_i8", 1, 1, 0, 1)

/* dup / cont / cpy: <source type>_<destination type>. Plain destinations
 * convert per element (cpy.comp), block destinations per block (cpy_q.comp),
 * and a copy between tensors of one type that is not F32/F16/BF16 moves
 * opaque units (cpy_raw.comp). vk_ops.c tells the three families apart by
 * their ranges in this list: keep each family together, in this order. */
#define VK_KERNELS_CPY(X)                                     \
    X(CPY_F32_F32, "cpy_f32_f32", 4, 0, 0, 4)                 \
    X(CPY_F32_F16, "cpy_f32_f16", 4, 0, 0, 2)                 \
    X(CPY_F32_BF16, "cpy_f32_bf16", 4, 0, 0, 2)               \
    X(CPY_F16_F32, "cpy_f16_f32", 2, 0, 0, 4)                 \
    X(CPY_F16_F16, "cpy_f16_f16", 2, 0, 0, 2)                 \
    X(CPY_F16_BF16, "cpy_f16_bf16", 2, 0, 0, 2)               \
    X(CPY_BF16_F32, "cpy_bf16_f32", 2, 0, 0, 4)               \
    X(CPY_BF16_F16, "cpy_bf16_f16", 2, 0, 0, 2)               \
    X(CPY_BF16_BF16, "cpy_bf16_bf16", 2, 0, 0, 2)             \
    X(CPY_Q8_0_F32, "cpy_q8_0_f32", 2, 0, 0, 4)               \
    X(CPY_Q8_0_F16, "cpy_q8_0_f16", 2, 0, 0, 2)               \
    X(CPY_Q8_0_BF16, "cpy_q8_0_bf16", 2, 0, 0, 2)             \
    X(CPY_Q4_0_F32, "cpy_q4_0_f32", 2, 0, 0, 4)               \
    X(CPY_Q4_0_F16, "cpy_q4_0_f16", 2, 0, 0, 2)               \
    X(CPY_Q4_0_BF16, "cpy_q4_0_bf16", 2, 0, 0, 2)             \
    X(CPY_F32_Q8_0, "cpy_f32_q8_0", 4, 0, 0, 2)               \
    X(CPY_F16_Q8_0, "cpy_f16_q8_0", 2, 0, 0, 2)               \
    X(CPY_BF16_Q8_0, "cpy_bf16_q8_0", 2, 0, 0, 2)             \
    X(CPY_Q4_0_Q8_0, "cpy_q4_0_q8_0", 2, 0, 0, 2)             \
    X(CPY_F32_Q4_0, "cpy_f32_q4_0", 4, 0, 0, 2)               \
    X(CPY_F16_Q4_0, "cpy_f16_q4_0", 2, 0, 0, 2)               \
    X(CPY_BF16_Q4_0, "cpy_bf16_q4_0", 2, 0, 0, 2)             \
    X(CPY_Q8_0_Q4_0, "cpy_q8_0_q4_0", 2, 0, 0, 2)             \
    X(CPY_Q8_0_Q8_0, "cpy_q8_0_q8_0", 2, 0, 0, 2)             \
    X(CPY_Q4_0_Q4_0, "cpy_q4_0_q4_0", 2, 0, 0, 2)             \
    X(CPY_I32_I32, "cpy_i32_i32", 2, 0, 0, 2)                 \
    X(CPY_I16_I16, "cpy_i16_i16", 2, 0, 0, 2)                 \
    X(CPY_I64_I64, "cpy_i64_i64", 2, 0, 0, 2)                 \
    X(CPY_F64_F64, "cpy_f64_f64", 2, 0, 0, 2)                 \
    X(CPY_I8_I8, "cpy_i8_i8", 1, 0, 0, 1)

typedef enum vk_kernel_id {
#define VK_KID(id, name, e0, e1, e2, e3) VK_K_##id,
    VK_KERNELS(VK_KID)
#undef VK_KID
    VK_K_COUNT
} vk_kernel_id;

typedef struct vk_kernel_desc {
    const char *name;
    uint8_t esize[4];
} vk_kernel_desc;
extern const vk_kernel_desc vk_kernel_descs[VK_K_COUNT];

enum { VK_KS_UNBUILT = 0, VK_KS_READY = 1, VK_KS_FAILED = 2 };

/* Device capabilities a kernel's SPIR-V may declare (from its OpCapability
 * list), so a kernel the device cannot run is never built nor chosen. */
enum {
    VK_CAP_16BIT_STORAGE = 1u << 0,
    VK_CAP_FLOAT64 = 1u << 1,
    VK_CAP_SUBGROUP_BASIC = 1u << 2,
    VK_CAP_SUBGROUP_ARITH = 1u << 3,
    VK_CAP_FLOAT16 = 1u << 4,
    VK_CAP_INT8 = 1u << 5,
    VK_CAP_INT16 = 1u << 6,
    VK_CAP_INT64 = 1u << 7,
    VK_CAP_8BIT_STORAGE = 1u << 8,
    VK_CAP_BDA = 1u << 9,          /* PhysicalStorageBufferAddresses */
    VK_CAP_COOPMAT = 1u << 10,     /* CooperativeMatrixKHR */
    VK_CAP_VMM = 1u << 11,         /* VulkanMemoryModel */
    VK_CAP_DOT = 1u << 12,         /* DotProduct* (integer dot products) */
    VK_CAP_SUBGROUP_SHUFFLE = 1u << 13, /* GroupNonUniformShuffle */
    VK_CAP_COOPMAT2 = 1u << 14, /* CooperativeMatrix*NV, TensorAddressingNV (VK_NV_cooperative_matrix2) */
    VK_CAP_SPIRV_1_6 = 1u << 15, /* not a capability: the module is SPIR-V 1.6 (needs Vulkan 1.3) */
    VK_CAP_UNKNOWN = 1u << 31,
};

typedef struct vk_kernel {
    _Atomic int state;         /* VK_KS_* */
    VkPipeline pipe;
    VkShaderModule module;
    uint32_t caps;             /* VK_CAP_* the SPIR-V declares */
    bool runnable;             /* the device has every capability it needs */
    /* bound through an ordinary descriptor set even where the device has
     * push descriptors (its pipeline made with layout_sets): the
     * workgroup-scope matrix kernels, which ran 4x slower through push
     * descriptors in one H200 run (42), a slowness later seen through
     * sets too in the first processes on a freshly started machine
     * (bench/RESULTS.md, runs 44-49): kept, as measured no slower;
     * TSL_VULKAN_SET_KERNELS=name,... adds kernels (tests) */
    bool sets;
    /* the failure, cached with the driver's answer (state FAILED) */
    tsl_status fail_status;
    int64_t fail_code;
    char fail_text[128];
    /* a replacement SPIR-V and entry point (vk_test_set_kernel) */
    uint32_t *spv_override;
    size_t spv_override_size;
    char entry[64];
} vk_kernel;

/* ---- devices ----------------------------------------------------------- */

/* VK_KHR_cooperative_matrix postdates Debian 12's Vulkan headers (1.3.239):
 * the few definitions the backend uses, with the registry's values. */
#ifndef VK_KHR_cooperative_matrix
#define VK_KHR_cooperative_matrix 1
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR ((VkStructureType)1000506000)
#define VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR ((VkStructureType)1000506001)
typedef enum VkComponentTypeKHR {
    VK_COMPONENT_TYPE_FLOAT16_KHR = 0,
    VK_COMPONENT_TYPE_FLOAT32_KHR = 1,
    VK_COMPONENT_TYPE_FLOAT64_KHR = 2,
    VK_COMPONENT_TYPE_SINT8_KHR = 3,
    VK_COMPONENT_TYPE_SINT16_KHR = 4,
    VK_COMPONENT_TYPE_SINT32_KHR = 5,
    VK_COMPONENT_TYPE_SINT64_KHR = 6,
    VK_COMPONENT_TYPE_UINT8_KHR = 7,
    VK_COMPONENT_TYPE_UINT16_KHR = 8,
    VK_COMPONENT_TYPE_UINT32_KHR = 9,
    VK_COMPONENT_TYPE_UINT64_KHR = 10,
    VK_COMPONENT_TYPE_MAX_ENUM_KHR = 0x7FFFFFFF
} VkComponentTypeKHR;
typedef enum VkScopeKHR {
    VK_SCOPE_DEVICE_KHR = 1,
    VK_SCOPE_WORKGROUP_KHR = 2,
    VK_SCOPE_SUBGROUP_KHR = 3,
    VK_SCOPE_QUEUE_FAMILY_KHR = 5,
    VK_SCOPE_MAX_ENUM_KHR = 0x7FFFFFFF
} VkScopeKHR;
typedef struct VkCooperativeMatrixPropertiesKHR {
    VkStructureType sType;
    void *pNext;
    uint32_t MSize, NSize, KSize;
    VkComponentTypeKHR AType, BType, CType, ResultType;
    VkBool32 saturatingAccumulation;
    VkScopeKHR scope;
} VkCooperativeMatrixPropertiesKHR;
typedef struct VkPhysicalDeviceCooperativeMatrixFeaturesKHR {
    VkStructureType sType;
    void *pNext;
    VkBool32 cooperativeMatrix;
    VkBool32 cooperativeMatrixRobustBufferAccess;
} VkPhysicalDeviceCooperativeMatrixFeaturesKHR;
typedef VkResult(VKAPI_PTR *PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)(
    VkPhysicalDevice physicalDevice, uint32_t *pPropertyCount, VkCooperativeMatrixPropertiesKHR *pProperties);
#endif

/* One matrix shape the device multiplies cooperatively (subgroup scope):
 * A (M x K) times B (K x N) accumulated into C (M x N). */
typedef struct vk_coopmat_shape {
    uint32_t m, n, k;
    VkComponentTypeKHR a, b, c;
} vk_coopmat_shape;
#define VK_MAX_COOPMAT_SHAPES 16

typedef struct vk_features {
    bool storage_16bit, float16, int8, float64, int16, int64, storage_8bit;
    bool subgroup_basic, subgroup_arith, subgroup_shuffle;
    uint32_t subgroup_size;
    bool push_descriptors, timeline_semaphore, cooperative_matrix, device_fault, nv_checkpoints, robustness2;
    bool int_dot, int_dot_fast; /* shaderIntegerDotProduct (VK_KHR_shader_integer_dot_product); 4x8 signed in hardware */
    bool exec_stats; /* TSL_VULKAN_PIPELINE_STATS=1 and VK_KHR_pipeline_executable_properties: log each pipeline's statistics */
    bool robust_access; /* robustBufferAccess enabled (checked mode) */
    bool buffer_device_address; /* bufferDeviceAddress, enabled when present */
    bool vulkan_memory_model;   /* vulkanMemoryModel, enabled when present */
    bool spirv_1_6;             /* the device takes SPIR-V 1.6 (Vulkan 1.3) */
    /* VK_NV_cooperative_matrix2 enabled with workgroup scope, flexible
     * dimensions and tensor addressing: the most invocations a
     * workgroup-scope matrix may span */
    bool coopmat2;
    uint32_t coopmat2_max_wg;
    /* cooperative_matrix: the feature is enabled and these subgroup-scope
     * shapes were reported (vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR) */
    vk_coopmat_shape coopmat[VK_MAX_COOPMAT_SHAPES];
    int n_coopmat;
} vk_features;

typedef struct vk_block vk_block;
typedef struct vk_grave vk_grave;
struct vk_backend;

typedef struct vk_device {
    int refs;        /* backends holding it (registry lock) */
    int index;       /* physical device index */
    VkPhysicalDevice pd;
    VkDevice dev;
    VkQueue queue;
    uint32_t qfam;
    pthread_mutex_t qlock; /* vkQueueSubmit needs the queue externally synchronized */
    VkPhysicalDeviceProperties props;
    VkPhysicalDeviceMemoryProperties memprops;
    vk_features f;
    tsl_vulkan_device_info info;
    char name[96];

    VkDescriptorSetLayout dsl;
    VkPipelineLayout layout;
    /* Where the device has push descriptors: the same bindings as ordinary
     * descriptor sets, for the kernels bound that way (vk_kernel.sets);
     * VK_NULL_HANDLE without push descriptors (every kernel uses dsl and
     * layout, ordinary sets already). */
    VkDescriptorSetLayout dsl_sets;
    VkPipelineLayout layout_sets;
    pthread_mutex_t klock; /* serializes builds */
    vk_kernel k[VK_K_COUNT];
    int set_ids[32]; /* the kernels with vk_kernel.sets (vk_pipeline_init) */
    int n_set_ids;

    /* memory (vk_memory.c) */
    pthread_mutex_t mlock;
    vk_block *blocks;
    uint32_t dev_type;     /* memory type of tensor memory */
    bool dev_mapped;       /* tensor memory is host-visible and mapped */
    uint32_t host_type;    /* host-visible coherent type for staging */
    VkDeviceSize heap_size, heap_used;
    uintptr_t va_next;     /* opaque addresses handed out as buffer bases */

    /* loss (vk_device.c): the latch is the common layer's, shared by every
     * backend on this device (backend_set_dev) */
    backend_dev *bdev;
    _Atomic int hung;      /* a wait ran out: bound every later wait tightly */
    _Atomic int unclean;   /* work of a freed backend never finished: leak, never wait */
    /* bumped whenever a VkBuffer of tensor memory or a pipeline goes (a block
     * freed, a recovery): command buffers recorded before reference it and
     * are never submitted again (vk_backend.c reuses the others) */
    _Atomic uint64_t epoch;
    /* bumped when a kernel turns failed or is forgiven (supports_op of
     * every backend on the device answers by it) */
    _Atomic uint64_t kfail_gen;
    /* bumped by every allocation and free of tensor memory */
    _Atomic uint64_t mem_gen;

    /* recovery: the device's objects are made again on a new VkDevice; the
     * old ones wait in graves until they are provably idle */
    uint32_t gen;          /* bumped by every recovery */
    vk_grave *graves;
    pthread_mutex_t blist_lock;
    struct vk_backend *backends; /* every backend on the device (vk_backend.c) */

    PFN_vkCmdPushDescriptorSetKHR push_descriptor_set;
    PFN_vkGetDeviceFaultInfoEXT get_fault_info;
    PFN_vkCmdSetCheckpointNV set_checkpoint;
    int cp_every; /* an NV checkpoint every cp_every-th level (TSL_VULKAN_CHECKPOINTS; 0, the default, none) */
    PFN_vkGetQueueCheckpointDataNV get_checkpoints;
} vk_device;

/* Acquire the shared device object for physical device index (creating it
 * on first use), or release it (destroyed with the last backend, unless
 * work submitted to it never finished: then its objects are leaked with a
 * log line rather than waited on). */
vk_device *vk_device_acquire(int index, tsl_error *err);
void vk_device_release(vk_device *d);
/* The index tsl_backend_vulkan_new(-1) uses: TSL_VULKAN_DEVICE, else the
 * first discrete GPU, else the first usable device; -1 with err filled when
 * there is none. */
int vk_device_pick(tsl_error *err);
/* Latch DEVICE_LOST for every backend on d with this cause (first wins),
 * after adding what VK_EXT_device_fault says, when present, to the record
 * (*cause is updated). Returns DEVICE_LOST. */
tsl_status vk_device_set_lost(vk_device *d, tsl_error *cause);
bool vk_device_is_lost(const vk_device *d);
/* Copy the latched cause into err (status DEVICE_LOST). */
tsl_status vk_device_lost_error(const vk_device *d, tsl_error *err);
/* Names the node the NV checkpoints say was running, or -1. */
int vk_device_checkpoint_node(vk_device *d);
/* Recovery: make the device's objects again on a new VkDevice (the old
 * VkDevice, kernels and memory blocks go to a grave, destroyed later once
 * provably idle, or never if hung). Nothing changes when it fails. Returns
 * the new grave through *gr, for the backends' own objects. */
tsl_status vk_device_reopen(vk_device *d, vk_grave **gr, tsl_error *err);
enum { VK_GO_CMDPOOL, VK_GO_FENCE, VK_GO_DPOOL, VK_GO_BUFFER, VK_GO_MEMORY, VK_GO_QUERYPOOL };
/* Park an object of the old VkDevice in its grave; a fence still pending
 * keeps the grave from being destroyed until it signals. */
void vk_grave_add(vk_grave *gr, int kind, uint64_t handle, bool pending);
/* Destroy the graves whose work is done (never a hung one). final: the
 * device goes; what cannot be destroyed is left allocated, logged. */
void vk_graves_collect(vk_device *d, bool final);
/* Name of a VkResult through the classification table. */
const char *vk_result_name(VkResult r, tsl_fault_phase phase);
/* Fill err from a driver answer: status through tsl_fault_classify. */
tsl_status vk_error(tsl_error *err, VkResult r, tsl_fault_phase phase, const char *backend, const char *device,
                    int node, const tsl_tensor *t, const char *kernel, const char *what);
/* Validation-layer errors reported so far (process-wide). */
uint64_t vk_validation_errors(void);
/* While set on this thread, validation messages are also appended to buf
 * (a build collects the driver's text for its record). */
void vk_capture_messages(char *buf, size_t n);

/* ---- memory (vk_memory.c) -------------------------------------------------- */

typedef struct vk_range {
    VkDeviceSize off, size;
} vk_range;

struct vk_block {
    VkDeviceMemory mem;
    VkBuffer buf;        /* one buffer over the whole block: bindings use offsets */
    VkDeviceSize size;
    void *map;           /* when the device's tensor memory is mapped */
    vk_range *free;      /* free ranges, sorted by offset */
    int n_free, cap_free;
    VkDeviceSize used;
    vk_block *next;
};

/* A backend buffer: a range of one block, and the opaque address range
 * handed out as its base (tensor->data = base + offset). */
typedef struct vk_buf {
    vk_block *blk;
    VkDeviceSize off, size;
    uintptr_t va;
    uint32_t gen;        /* the device generation its memory belongs to */
    struct vk_backend *owner;
} vk_buf;

tsl_status vk_mem_init(vk_device *d, tsl_error *err);
void vk_mem_fini(vk_device *d);
/* Destroy a block of VkDevice dev (a grave's). */
void vk_block_destroy_on(VkDevice dev, vk_block *b);
/* Carve size bytes (ALLOC_FAILED with err filled when it cannot be had). */
vk_buf *vk_mem_alloc(vk_device *d, VkDeviceSize size, const char *bname, tsl_error *err);
void vk_mem_free(vk_device *d, vk_buf *b);
/* A host-visible coherent buffer (staging, status words): mapped. */
tsl_status vk_host_buffer(vk_device *d, VkDeviceSize size, VkBuffer *buf, VkDeviceMemory *mem, void **map,
                          tsl_error *err, const char *bname);
/* The host-visible buffer vk_host_buffer made, destroyed (handles NULL). */
void vk_host_buffer_free(vk_device *d, VkBuffer *buf, VkDeviceMemory *mem, void **map);

/* ---- pipelines (vk_pipeline.c) ------------------------------------------- */

tsl_status vk_pipeline_init(vk_device *d, tsl_error *err);
/* Recovery: hand the built pipelines to gr and mark every kernel unbuilt
 * (replacement SPIR-V from vk_test_set_kernel is kept). */
void vk_pipeline_detach(vk_device *d, vk_grave *gr);
/* Park a pipeline / module in a grave (vk_device.c). */
void vk_grave_add_pipeline(vk_grave *gr, VkPipeline p, VkShaderModule m);
void vk_pipeline_fini(vk_device *d);
/* The built pipeline of kernel id, building it now if needed. On failure
 * *fk receives the kernel (its fail_* fields hold the cached answer). */
VkPipeline vk_kernel_get(vk_device *d, int id, const vk_kernel **fk);
/* Forget the device's build failures: those kernels are built again on
 * next use (recovery without a loss). */
void vk_pipeline_reset_failed(vk_device *d);

/* ---- ops (vk_ops.c) -------------------------------------------------------- */

/* One binding of a node: the block, the descriptor range, where the tensor
 * starts inside it (in the binding's elements) and the bytes it spans. */
typedef struct vk_bind {
    vk_block *blk;
    VkDeviceSize off, range;
    uint32_t eoff;
    VkDeviceSize lo, hi; /* the tensor's bytes within the block (hazards) */
} vk_bind;

typedef struct vk_exec {
    tsl_tensor *node;
    int index;       /* node index in the graph */
    int kernel;      /* vk_kernel_id */
    VkPipeline pipe;
    VkPipeline pipe2; /* a kernel dispatched first (the integer-dot mat-vec's column quantizer) */
    VkPipeline cvt;   /* a converting product's (vk_mm_conv): the activations' copy to F16, dispatched first */
    VkPipeline wcvt;  /* ... and its weights' (vk_mm_wconv), dispatched before that */
    /* fusion (vk_backend.c): rms_norm_mul, the RMS_NORM node this MUL
     * absorbed (its eps); an integer-dot mat-vec, the ADD it absorbed, whose
     * other operand (the residual) is rb and whose output is b[3] */
    const tsl_tensor *fused;
    vk_bind rb;
    /* a rope (or rope_set_rows) that absorbed rms_norm_mul: the RMS_NORM
     * node (its eps and source); x bound at 0, w at 2 */
    const tsl_tensor *norm;
    /* attn_dec1 whose F32 output is left unwritten: its one reader, the
     * exec right after it, takes the quantized column (vk_fuse; vk_plan
     * keeps the two in one command buffer) */
    bool noout;
    /* rms_norm_mul whose one row integer-dot mat-vecs read next: it also
     * writes the row quantized into the scratch, bound at b[2] (written) */
    bool qout;
    /* an integer-dot mat-vec that absorbed the ropes and cache stores of a
     * decoder's q, k and v (a VECQR kernel, vk_fuse_qkv_rope): the words
     * vk_mm_params puts in its push constants (mul_mat_vecq.comp's R_*
     * words, then the block after the residual's), and NEOX pairs; fused is
     * the rope of q, rb the positions, b[3] q's rope output, bx the caches */
    uint32_t rope[13];
    bool rope_neox;
    const tsl_tensor *kstore; /* ... and the K cache's set_rows node, which a bad position names */
    /* a VECQN product that took in the norm after it (vk_fuse_norms): the
     * normed row and its binding, which the products reading its column
     * present (the column is at bx, the norm's weight at by); and those
     * products: their column is the norm's, unscaled, s from ns_eps */
    const tsl_tensor *nq_y;
    vk_bind nq_ybind;
    bool nscale;
    float ns_eps;
    /* an integer-dot mat-vec dispatched beside the kernel that makes its
     * column (vk_wait_edge): the count of that kernel's workgroups to wait
     * for (0: a barrier before it, no wait) at word wait_word of the
     * column's binding */
    uint32_t wait_n, wait_word;
    /* the execs after this one that must be in its command buffer (they
     * find their column in its state: vk_plan) */
    int keep;
    vk_bind b[4];    /* src0, src1, src2, dst; blk NULL: bound to dst as a placeholder */
    vk_bind bx;      /* binding 5, a scratch the kernel reads and writes (attn_dec1: the
                        partials, counters and quantized column); blk NULL: none */
    vk_bind by;      /* binding 6, a fourth source the kernel reads (the q/k/v product
                        with its ropes: qwen2's biases); blk NULL: none */
    double cost_s;   /* the watchdog's allowance for this node */
} vk_exec;

/* The kernel that runs node on d: the first variant the device can run
 * (e.g. the matrix-vector kernel for one column, else the tiled one), or -1
 * (no kernel for this op/type/layout). With usable_only, -1 also when that
 * kernel failed to build on the device or is in be's failure cache (be may
 * be NULL); otherwise it is returned anyway, so the compute can name it. */
int vk_kernel_for(const vk_device *d, const tsl_tensor *node, tsl_backend *be, bool usable_only);
/* Fill the push constants (returns their size in bytes) and the grid. */
uint32_t vk_op_params(const vk_device *d, const vk_exec *x, uint32_t pc[VK_PC_WORDS], uint32_t grid[3]);

#define VK_MAX_CAND 4 /* kernel variants one node may have, best first */
/* mul_mat (vk_ops_mm.c): is kernel one of VK_KERNELS_MM; its candidates for
 * node n (the same contract as the element-wise ones in vk_ops.c); its push
 * constants and grid. */
bool vk_mm_kernel(int kernel);
int vk_mm_candidates(const vk_device *d, const tsl_tensor *n, int cand[VK_MAX_CAND]);
uint32_t vk_mm_params(const vk_device *d, const vk_exec *x, uint32_t pc[VK_PC_WORDS], uint32_t grid[3]);
/* The integer-dot mat-vec (VK_MM_VECQ) first quantizes its column into a
 * scratch range of VK_QSCR_SLOT bytes per command buffer (bound as the
 * node's binding 2): is kernel such a mat-vec; the scratch bytes node n
 * needs; the quantizer's push constants and grid (x->b[2] the scratch). */
#define VK_QSCR_SLOT ((VkDeviceSize)256 << 10)
/* where a VECQN product writes the next norm's column in it (words): the
 * upper half, apart from the column it reads */
#define VK_QSCR_ALT_WORD ((uint32_t)(VK_QSCR_SLOT / 8))
/* Decode attention fused into attn_dec + attn_combine (vk_backend.c): the
 * key ranges per (head, column) and keys per range, and the scratch the
 * partials take (bytes; VK_ASCR_SIZE at most, or no fusion). */
#define VK_ASCR_SIZE ((VkDeviceSize)1 << 20)
/* attn_dec1 (one dispatch) keeps in the same scratch a counter per (head,
 * column) (16 KiB from this word) and the output quantized to Q8_0 (48 KiB
 * from this one); its partials take the bytes below */
#define VK_ASCR_CNT_BYTES ((VkDeviceSize)16u << 10)
#define VK_ASCR_CNT_WORD ((uint32_t)((VK_ASCR_SIZE - (48u << 10) - VK_ASCR_CNT_BYTES) / 4))
#define VK_ASCR_Q8_WORD ((uint32_t)((VK_ASCR_SIZE - (48u << 10)) / 4))
/* mul_mat kernels that read F16 activations where the node's are F32
 * (vk_kernels_mm.h, VK_MM_CV_SET): the backend first rounds the node's
 * activations to F16 into a scratch of VK_HSCR_SIZE bytes (cpy_f32_f16),
 * which binding 1 then reads. Is kernel one; the copy's bytes for node n;
 * the copy's dense F16 shape as a tensor (src[0] the activations, for the
 * copy's parameters). */
#define VK_HSCR_SIZE ((VkDeviceSize)64 << 20)
bool vk_mm_conv(int kernel);
uint64_t vk_mm_conv_bytes(const tsl_tensor *n);
void vk_mm_conv_tensor(const tsl_tensor *n, tsl_tensor *h);
/* ... and those of them whose Q8_0 / Q4_0 weights go to F16 first, into a
 * scratch of at most VK_WSCR_SIZE bytes (cpy_q8_0_f16 / cpy_q4_0_f16),
 * which binding 0 then reads: is kernel one; the copy's bytes; its
 * dense F16 shape (src[0] the weights). */
#define VK_WSCR_SIZE ((VkDeviceSize)128 << 20)
bool vk_mm_wconv(int kernel);
uint64_t vk_mm_wconv_bytes(const tsl_tensor *n);
void vk_mm_wconv_tensor(const tsl_tensor *n, tsl_tensor *h);
/* Is kernel attn_dec1 (decode attention in one dispatch)? */
static inline bool vk_is_attn1(int kernel) {
    return kernel == VK_K_ATTN_DEC1_F16 || kernel == VK_K_ATTN_DEC1_F16_MASK_F32 || kernel == VK_K_ATTN_DEC1_F16_MASK_F16;
}
void vk_attn_split(int64_t heads_cols, int64_t n_kv, uint32_t *nsplit, uint32_t *klen);
bool vk_mm_needs_quant(int kernel);
/* The twin of integer-dot kernel id reading split Q4_0 weights
 * (vk_kernels_mm.h, VK_MM_Q4S_SET), or -1. */
int vk_mm_q4s_twin(int id);
/* Can fused-only kernel id (VECQR: the q/k/v product with its ropes; VECQN:
 * a product making the next norm's column) run node n, the product it
 * stands for, on d? */
bool vk_mm_fused_fits(const vk_device *d, int id, const tsl_tensor *n);
uint64_t vk_mm_qscr_bytes(const tsl_tensor *n);
uint32_t vk_mm_quant_params(const vk_device *d, const vk_exec *x, uint32_t pc[VK_PC_WORDS], uint32_t grid[3]);
/* Shared launch helpers (vk_ops.c): F32 tensor; a type get_rows and mul_mat
 * read as a table; a 64-bit count as a push-constant word; the four strides
 * of t from dimension `from` in es-byte elements; a 1-D grid of `groups`
 * workgroups folded into x and y under the device's limits. */
bool vk_is_f32(const tsl_tensor *t);
bool vk_table_type(tsl_type t);
uint32_t vk_u32(int64_t v);
uint32_t *vk_put_strides(uint32_t *pc, const tsl_tensor *t, int es, int from);
void vk_grid(const vk_device *d, uint64_t groups, uint32_t grid[3]);

/* Build every kernel the device can run now, reporting each through fn
 * (tsl_backend_build_kernels); returns how many failed. */
int vk_backend_build_kernels(tsl_backend *be, tsl_kernel_fn fn, void *user);
/* The device of a Vulkan backend, or NULL for any other backend. */
vk_device *vk_backend_dev(const tsl_backend *be);
/* Replace kernel id's SPIR-V / entry point (vk_test_set_kernel). */
tsl_status vk_kernel_override(vk_device *d, int id, const uint32_t *spv, size_t size, const char *entry,
                              tsl_error *err);
/* The embedded SPIR-V of kernel name, or NULL. */
const vk_shader_blob *vk_shader_find(const char *name);

#endif /* TSL_VK_H */
