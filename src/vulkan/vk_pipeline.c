/*
 * vk_pipeline.c - kernels: one compute pipeline per op, type and variant,
 * built from the embedded SPIR-V on first use and cached, failures included
 * (FAULTS.md section 6).
 *
 * A build that the driver refuses (a missing entry point, a module it
 * cannot compile) is cached as FAILED with the driver's answer: the VkResult
 * through the classification table at phase BUILD, what our own look at the
 * SPIR-V says (the entry points it really has), and any message the
 * validation layer gave while building. No encoder ever binds a failed
 * kernel: the compute that needed it fails naming it, and from then on
 * vk_kernel_for() passes it over, so supports_op answers false and the
 * scheduler sends the op elsewhere.
 *
 * Before anything is built, each kernel's SPIR-V is read for the
 * capabilities it declares (16-bit storage, float64, subgroup arithmetic,
 * ...). A kernel needing one the device lacks is never chosen: that is a
 * missing kernel for this device, not a failure. So is an optional kernel
 * whose SPIR-V this build does not have (cooperative-matrix kernels need a
 * newer GLSL compiler than the build may have found), whereas any other
 * missing SPIR-V is chosen and fails to build, naming itself.
 *
 * The mul_mat kernels (vk_kernels_mm.h) may share one SPIR-V and differ in
 * specialization constants (workgroup size, rows per workgroup, tile
 * shape): the constants are given at pipeline creation, so each variant is
 * compiled by the driver with its sizes known, loops unrolled and arrays
 * in registers. They read the subgroup size at run time rather than
 * requiring one (the device is created without subgroup-size control).
 *
 * Builds are serialized by one lock per device (two backends on one device
 * never build the same kernel twice); the READY state is published with a
 * release store, so the common path is one acquire load and no lock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan/vk.h"

const vk_kernel_desc vk_kernel_descs[VK_K_COUNT] = {
#define VK_KDESC(id, nm, e0, e1, e2, e3) [VK_K_##id] = {.name = nm, .esize = {e0, e1, e2, e3}},
    VK_KERNELS(VK_KDESC)
#undef VK_KDESC
};

const vk_shader_blob *vk_shader_find(const char *name) {
    for (size_t i = 0; i < vk_shader_blob_count; i++)
        if (strcmp(vk_shader_blobs[i].name, name) == 0) return &vk_shader_blobs[i];
    return NULL;
}

/* The embedded SPIR-V kernel id is built from (shared by variants). */
static const vk_shader_blob *vk_kernel_blob(int id) {
    const vk_mm_info *mm = vk_mm_info_of(id);
    return vk_shader_find(mm ? mm->blob : vk_kernel_descs[id].name);
}

/* ---- SPIR-V ------------------------------------------------------------------ */

#define SPV_MAGIC 0x07230203u
#define SPV_OP_ENTRY_POINT 15u
#define SPV_OP_CAPABILITY 17u

static uint32_t spv_cap_bit(uint32_t cap) {
    switch (cap) {
    case 1: return 0;                                   /* Shader */
    case 9: return VK_CAP_FLOAT16;
    case 10: return VK_CAP_FLOAT64;
    case 11: return VK_CAP_INT64;
    case 22: return VK_CAP_INT16;
    case 39: return VK_CAP_INT8;
    case 61: return VK_CAP_SUBGROUP_BASIC;
    case 63: return VK_CAP_SUBGROUP_ARITH;
    case 65: return VK_CAP_SUBGROUP_SHUFFLE;
    case 4433: return VK_CAP_16BIT_STORAGE;             /* StorageBuffer16BitAccess */
    case 4448: return VK_CAP_8BIT_STORAGE;              /* StorageBuffer8BitAccess */
    case 5345: return VK_CAP_VMM;                       /* VulkanMemoryModel */
    case 5347: return VK_CAP_BDA;                       /* PhysicalStorageBufferAddresses */
    case 6022: return VK_CAP_COOPMAT;                   /* CooperativeMatrixKHR */
    case 6016: case 6017: case 6018: case 6019: return VK_CAP_DOT; /* DotProduct* */
    /* CooperativeMatrix{Reductions,Conversions,PerElementOperations,
     * TensorAddressing,BlockLoads}NV, TensorAddressingNV */
    case 5430: case 5431: case 5432: case 5433: case 5434: case 5439: return VK_CAP_COOPMAT2;
    default: return VK_CAP_UNKNOWN;
    }
}

/* The capabilities a module declares; and, when names is given, its
 * entry-point names (comma-separated) into names. Returns false for
 * something that is not SPIR-V. */
static bool spv_scan(const uint32_t *w, size_t bytes, uint32_t *caps, char *names, size_t n) {
    *caps = 0;
    if (names && n) names[0] = 0;
    size_t nw = bytes / 4;
    if (!w || nw < 5 || w[0] != SPV_MAGIC) return false;
    if (w[1] >= 0x00010600u) *caps |= VK_CAP_SPIRV_1_6;
    for (size_t i = 5; i < nw;) {
        uint32_t op = w[i] & 0xffffu, wc = w[i] >> 16;
        if (wc == 0 || i + wc > nw) return false;
        if (op == SPV_OP_CAPABILITY && wc >= 2) *caps |= spv_cap_bit(w[i + 1]);
        if (op == SPV_OP_ENTRY_POINT && wc >= 4 && names && n) {
            /* literal string: bytes after the model and the id */
            const char *s = (const char *)&w[i + 3];
            size_t max = (size_t)(wc - 3) * 4, len = strnlen(s, max), cur = strlen(names);
            if (cur + len + 3 < n) snprintf(names + cur, n - cur, "%s'%.*s'", cur ? ", " : "", (int)len, s);
        }
        i += wc;
    }
    return true;
}

/* The driver's statistics of a pipeline, one log line (TSL_VULKAN_PIPELINE_STATS). */
static void vk_log_pipeline_stats(const vk_device *d, VkPipeline pipe, const char *name) {
    PFN_vkGetPipelineExecutableStatisticsKHR get =
        (PFN_vkGetPipelineExecutableStatisticsKHR)vkGetDeviceProcAddr(d->dev, "vkGetPipelineExecutableStatisticsKHR");
    if (!get) return;
    VkPipelineExecutableInfoKHR ei = {.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR, .pipeline = pipe};
    VkPipelineExecutableStatisticKHR st[24];
    uint32_t n = 24;
    for (uint32_t i = 0; i < n; i++) st[i] = (VkPipelineExecutableStatisticKHR){.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR};
    VkResult r = get(d->dev, &ei, &n, st);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) return;
    char line[1024];
    int len = snprintf(line, sizeof line, "vulkan%d: pipeline %s:", d->index, name);
    for (uint32_t i = 0; i < n && len < (int)sizeof line - 64; i++) {
        const VkPipelineExecutableStatisticKHR *s = &st[i];
        switch (s->format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
            len += snprintf(line + len, sizeof line - (size_t)len, " %s=%u;", s->name, (unsigned)s->value.b32);
            break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
            len += snprintf(line + len, sizeof line - (size_t)len, " %s=%lld;", s->name, (long long)s->value.i64);
            break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
            len += snprintf(line + len, sizeof line - (size_t)len, " %s=%llu;", s->name, (unsigned long long)s->value.u64);
            break;
        default:
            len += snprintf(line + len, sizeof line - (size_t)len, " %s=%g;", s->name, s->value.f64);
            break;
        }
    }
    TSL_LOGI("%s", line);
}

static uint32_t vk_device_caps(const vk_device *d) {
    uint32_t c = 0;
    if (d->f.storage_16bit) c |= VK_CAP_16BIT_STORAGE;
    if (d->f.float64) c |= VK_CAP_FLOAT64;
    if (d->f.float16) c |= VK_CAP_FLOAT16;
    if (d->f.int8) c |= VK_CAP_INT8;
    if (d->f.int16) c |= VK_CAP_INT16;
    if (d->f.int64) c |= VK_CAP_INT64;
    if (d->f.storage_8bit) c |= VK_CAP_8BIT_STORAGE;
    if (d->f.subgroup_basic) c |= VK_CAP_SUBGROUP_BASIC;
    if (d->f.subgroup_arith) c |= VK_CAP_SUBGROUP_ARITH;
    if (d->f.subgroup_shuffle) c |= VK_CAP_SUBGROUP_SHUFFLE;
    if (d->f.buffer_device_address) c |= VK_CAP_BDA;
    if (d->f.cooperative_matrix && d->f.n_coopmat > 0) c |= VK_CAP_COOPMAT;
    if (d->f.vulkan_memory_model) c |= VK_CAP_VMM;
    if (d->f.int_dot) c |= VK_CAP_DOT;
    if (d->f.coopmat2) c |= VK_CAP_COOPMAT2;
    if (d->f.spirv_1_6) c |= VK_CAP_SPIRV_1_6;
    return c;
}

static void vk_kernel_scan(vk_device *d, vk_kernel *k, const uint32_t *code, size_t size) {
    uint32_t caps = 0;
    bool ok = spv_scan(code, size, &caps, NULL, 0);
    k->caps = caps;
    /* a module we cannot read is left to the driver to refuse (and named) */
    k->runnable = !ok || (caps & ~vk_device_caps(d)) == 0;
}

/* Is kernel id bound through an ordinary descriptor set (vk_kernel.sets)?
 * The workgroup-scope matrix kernels, and those TSL_VULKAN_SET_KERNELS
 * names (comma-separated kernel names). */
static bool vk_kernel_uses_sets(int id) {
    const vk_mm_info *mm = vk_mm_info_of(id);
    if (mm && mm->family == VK_MM_CM2) return true;
    const char *s = getenv("TSL_VULKAN_SET_KERNELS");
    const char *name = vk_kernel_descs[id].name;
    const size_t len = strlen(name);
    while (s && *s) {
        size_t n = strcspn(s, ",");
        if (n == len && strncmp(s, name, n) == 0) return true;
        s += n;
        if (*s == ',') s++;
    }
    return false;
}

tsl_status vk_pipeline_init(vk_device *d, tsl_error *err) {
    d->n_set_ids = 0;
    for (int i = 0; i < VK_K_COUNT; i++) {
        vk_kernel *k = &d->k[i];
        memset(k, 0, sizeof *k);
        atomic_init(&k->state, VK_KS_UNBUILT);
        k->sets = vk_kernel_uses_sets(i) && d->n_set_ids < (int)(sizeof d->set_ids / sizeof d->set_ids[0]);
        if (k->sets) d->set_ids[d->n_set_ids++] = i;
        snprintf(k->entry, sizeof k->entry, "main");
        const vk_shader_blob *blob = vk_kernel_blob(i);
        if (blob) vk_kernel_scan(d, k, blob->code, blob->size);
        else k->runnable = !vk_mm_optional(i); /* else chosen, then fails to build, naming the missing SPIR-V */
    }
    return TSL_SUCCESS;
}

static void vk_kernel_drop(vk_device *d, vk_kernel *k) {
    if (k->pipe) atomic_fetch_add(&d->epoch, 1); /* command buffers naming it are not submitted again */
    if (k->pipe) vkDestroyPipeline(d->dev, k->pipe, NULL);
    if (k->module) vkDestroyShaderModule(d->dev, k->module, NULL);
    k->pipe = VK_NULL_HANDLE;
    k->module = VK_NULL_HANDLE;
}

void vk_pipeline_fini(vk_device *d) {
    for (int i = 0; i < VK_K_COUNT; i++) {
        vk_kernel_drop(d, &d->k[i]);
        free(d->k[i].spv_override);
        d->k[i].spv_override = NULL;
    }
}

/* Cache a failure of k with the driver's answer r (or a message of ours
 * when r is VK_SUCCESS: nothing to build from). klock held. */
static void vk_kernel_fail(vk_device *d, vk_kernel *k, const char *name, VkResult r, const char *detail) {
    const char *rname = "unknown";
    tsl_status s = r == VK_SUCCESS ? TSL_FAILED : tsl_fault_classify("VkResult", (int64_t)r, TSL_PHASE_BUILD, &rname);
    if (s == TSL_SUCCESS) s = TSL_FAILED;
    k->fail_status = s;
    k->fail_code = (int64_t)r;
    if (r == VK_SUCCESS)
        snprintf(k->fail_text, sizeof k->fail_text, "%s", detail);
    else if (detail && *detail)
        snprintf(k->fail_text, sizeof k->fail_text, "%s: %s", rname, detail);
    else
        snprintf(k->fail_text, sizeof k->fail_text, "%s", rname);
    vk_kernel_drop(d, k);
    atomic_store_explicit(&k->state, VK_KS_FAILED, memory_order_release);
    atomic_fetch_add_explicit(&d->kfail_gen, 1, memory_order_release);
    TSL_LOGW("vulkan%d: kernel %s could not be built (VkResult %d: %s)", d->index, name, (int)r, k->fail_text);
    if (s == TSL_DEVICE_LOST) {
        tsl_error cause;
        char bname[32];
        snprintf(bname, sizeof bname, "vulkan%d", d->index);
        vk_error(&cause, r, TSL_PHASE_BUILD, bname, d->name, -1, NULL, name, "building a kernel");
        vk_device_set_lost(d, &cause);
    }
}

/* Build kernel id. klock held, state UNBUILT. */
static void vk_kernel_build(vk_device *d, int id) {
    vk_kernel *k = &d->k[id];
    const char *name = vk_kernel_descs[id].name;
    const uint32_t *code = k->spv_override;
    size_t size = k->spv_override_size;
    if (!code) {
        const vk_shader_blob *blob = vk_kernel_blob(id);
        if (!blob) {
            vk_kernel_fail(d, k, name, VK_SUCCESS, "no SPIR-V for this kernel in this build");
            return;
        }
        code = blob->code;
        size = blob->size;
    }
    char msgs[256];
    vk_capture_messages(msgs, sizeof msgs);
    VkShaderModuleCreateInfo smi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = size, .pCode = code};
    VkResult r = vkCreateShaderModule(d->dev, &smi, NULL, &k->module);
    if (r == VK_SUCCESS) {
        /* specialization constants 0..5 of a mul_mat variant (0: the
         * shader's own default) */
        const vk_mm_info *mm = vk_mm_info_of(id);
        VkSpecializationMapEntry me[6];
        uint32_t nme = 0;
        for (uint32_t i = 0; mm && i < 6; i++)
            if (mm->spec[i]) me[nme++] = (VkSpecializationMapEntry){.constantID = i, .offset = i * 4u, .size = 4};
        VkSpecializationInfo si = {.mapEntryCount = nme,
                                   .pMapEntries = me,
                                   .dataSize = mm ? sizeof mm->spec : 0,
                                   .pData = mm ? mm->spec : NULL};
        VkComputePipelineCreateInfo ci = {
            .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
            .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                      .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                      .module = k->module,
                      .pName = k->entry,
                      .pSpecializationInfo = nme ? &si : NULL},
            .layout = k->sets && d->layout_sets ? d->layout_sets : d->layout,
        };
        if (d->f.exec_stats) ci.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
        r = vkCreateComputePipelines(d->dev, VK_NULL_HANDLE, 1, &ci, NULL, &k->pipe);
        if (r != VK_SUCCESS) k->pipe = VK_NULL_HANDLE;
        else if (d->f.exec_stats) vk_log_pipeline_stats(d, k->pipe, vk_kernel_descs[id].name);
    } else {
        k->module = VK_NULL_HANDLE;
    }
    vk_capture_messages(NULL, 0);
    if (r == VK_SUCCESS) {
        atomic_store_explicit(&k->state, VK_KS_READY, memory_order_release);
        return;
    }
    /* Say why, as far as we can tell: an entry point the module lacks is
     * the classic case, and the driver's code alone does not name it. */
    char detail[200], names[96], quoted[72];
    uint32_t caps;
    detail[0] = 0;
    snprintf(quoted, sizeof quoted, "'%s'", k->entry);
    if (!spv_scan(code, size, &caps, names, sizeof names))
        snprintf(detail, sizeof detail, "the module is not valid SPIR-V");
    else if (!strstr(names, quoted))
        snprintf(detail, sizeof detail, "entry point '%s' not found (the module has %s)", k->entry,
                 names[0] ? names : "none");
    if (msgs[0]) {
        size_t len = strlen(detail);
        int room = (int)(sizeof detail - len) - 3;
        if (room > 0) snprintf(detail + len, sizeof detail - len, "%s%.*s", len ? "; " : "", room, msgs);
    }
    vk_kernel_fail(d, k, name, r, detail);
}

VkPipeline vk_kernel_get(vk_device *d, int id, const vk_kernel **fk) {
    vk_kernel *k = &d->k[id];
    int st = atomic_load_explicit(&k->state, memory_order_acquire);
    if (st == VK_KS_READY) return k->pipe;
    if (st == VK_KS_UNBUILT) {
        pthread_mutex_lock(&d->klock);
        if (atomic_load_explicit(&k->state, memory_order_relaxed) == VK_KS_UNBUILT) vk_kernel_build(d, id);
        pthread_mutex_unlock(&d->klock);
        st = atomic_load_explicit(&k->state, memory_order_acquire);
        if (st == VK_KS_READY) return k->pipe;
    }
    if (fk) *fk = k;
    return VK_NULL_HANDLE;
}

tsl_status vk_kernel_override(vk_device *d, int id, const uint32_t *spv, size_t size, const char *entry,
                              tsl_error *err) {
    vk_kernel *k = &d->k[id];
    uint32_t *copy = NULL;
    if (spv) {
        copy = malloc(size ? size : 4);
        if (!copy) return error_set(err, TSL_ALLOC_FAILED, "vulkan", d->name, -1, NULL, NULL, "out of host memory");
        memcpy(copy, spv, size);
    }
    pthread_mutex_lock(&d->klock);
    vk_kernel_drop(d, k);
    free(k->spv_override);
    k->spv_override = copy;
    k->spv_override_size = copy ? size : 0;
    snprintf(k->entry, sizeof k->entry, "%s", entry ? entry : "main");
    k->fail_text[0] = 0;
    k->fail_code = 0;
    if (copy) {
        vk_kernel_scan(d, k, copy, size);
    } else {
        const vk_shader_blob *blob = vk_kernel_blob(id);
        if (blob) vk_kernel_scan(d, k, blob->code, blob->size);
    }
    atomic_store_explicit(&k->state, VK_KS_UNBUILT, memory_order_release);
    pthread_mutex_unlock(&d->klock);
    return TSL_SUCCESS;
}

void vk_pipeline_detach(vk_device *d, vk_grave *gr) {
    pthread_mutex_lock(&d->klock);
    for (int i = 0; i < VK_K_COUNT; i++) {
        vk_kernel *k = &d->k[i];
        vk_grave_add_pipeline(gr, k->pipe, k->module);
        k->pipe = VK_NULL_HANDLE;
        k->module = VK_NULL_HANDLE;
        k->fail_text[0] = 0;
        k->fail_code = 0;
        atomic_store_explicit(&k->state, VK_KS_UNBUILT, memory_order_release);
    }
    atomic_fetch_add_explicit(&d->kfail_gen, 1, memory_order_release);
    pthread_mutex_unlock(&d->klock);
}

void vk_pipeline_reset_failed(vk_device *d) {
    pthread_mutex_lock(&d->klock);
    for (int i = 0; i < VK_K_COUNT; i++) {
        vk_kernel *k = &d->k[i];
        if (atomic_load_explicit(&k->state, memory_order_relaxed) != VK_KS_FAILED) continue;
        k->fail_text[0] = 0;
        k->fail_code = 0;
        atomic_store_explicit(&k->state, VK_KS_UNBUILT, memory_order_release);
    }
    atomic_fetch_add_explicit(&d->kfail_gen, 1, memory_order_release);
    pthread_mutex_unlock(&d->klock);
}

const uint32_t *vk_test_kernel_spirv(const char *name, size_t *size) {
    const vk_shader_blob *b = NULL;
    for (int i = 0; name && i < VK_K_COUNT && !b; i++)
        if (strcmp(vk_kernel_descs[i].name, name) == 0) b = vk_kernel_blob(i);
    if (!b && name) b = vk_shader_find(name);
    if (size) *size = b ? b->size : 0;
    return b ? b->code : NULL;
}
