/*
 * vk_device.c - Vulkan instance, device selection and features, the
 * registry of devices shared by backends, and device loss.
 *
 * One device object per physical device. Every backend made for a device
 * shares its VkDevice, queue, kernels and memory blocks, because loss is a
 * property of the device, not of a context: when one compute finds the
 * device lost (the driver says so, or the watchdog sees a hang), every
 * backend on it must answer DEVICE_LOST from then on, with the original
 * cause (FAULTS.md section 8). The registry that makes the sharing possible
 * is the one piece of process-wide mutable state in this module (besides
 * the validation-message counter); it is a mutex-protected table, touched
 * only when backends are made and freed.
 *
 * The instance is created on first use and kept once it has found a
 * device (see vk_instance_put); one that found nothing is dropped, so a
 * process that sets VK_DRIVER_FILES after a first look gets a fresh one.
 *
 * Loss. The first cause wins and is kept for every later compute. Where the
 * driver offers VK_EXT_device_fault its description (and faulting address)
 * is added to the record, and with VK_NV_device_diagnostic_checkpoints the
 * node whose checkpoint was the last one reached is named. A hang is marked
 * separately (hung): nothing waits on that device without a tight bound
 * again. When a backend is freed with work that never finished (unclean),
 * the device's objects are leaked at teardown (logged) rather than
 * destroyed under a GPU that never finishes (FAULTS.md section 4).
 *
 * Validation (TSL_VULKAN_VALIDATE=1) loads the Khronos layer and routes its
 * messages to the log; errors are counted, so tests can assert none were
 * reported, and a kernel build captures the messages it caused (a
 * thread-local sink) as the driver's text of its record.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan/vk.h"

static struct {
    pthread_mutex_t lock;
    VkInstance inst;
    int inst_refs;
    bool validate;
    uint32_t layer_version; /* the validation layer's specVersion */
    uint32_t api;           /* the instance's API version: 1.3 where the loader has it, else 1.2 */
    bool found; /* the instance has found a usable device: keep it */
    VkDebugUtilsMessengerEXT msgr;
    vk_device *devs[VK_MAX_DEVICES];
    /* what a forked child inherited and must not use (kept reachable) */
    VkInstance orphan_inst[4];
    vk_device *orphan_devs[4 * VK_MAX_DEVICES];
    int n_orphan_inst, n_orphan_devs;
} vk_reg = {.lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t vk_fork_once = PTHREAD_ONCE_INIT;

/* Vulkan objects do not survive fork(): the driver's threads (lavapipe's
 * rasterizer threads, a GPU driver's submission threads) stay in the parent,
 * so work a child submits through them never runs. A child therefore drops
 * what it inherited and makes its own instance and devices on first use.
 * The inherited objects are kept reachable, not destroyed (destroying them
 * could wait on threads that do not exist here). A backend made before the
 * fork is unusable in the child: make backends after forking. */
static void vk_fork_prepare(void) { pthread_mutex_lock(&vk_reg.lock); }
static void vk_fork_parent(void) { pthread_mutex_unlock(&vk_reg.lock); }
static void vk_fork_child(void) {
    pthread_mutex_init(&vk_reg.lock, NULL);
    if (vk_reg.inst && vk_reg.n_orphan_inst < 4) vk_reg.orphan_inst[vk_reg.n_orphan_inst++] = vk_reg.inst;
    for (int i = 0; i < VK_MAX_DEVICES; i++) {
        if (vk_reg.devs[i] && vk_reg.n_orphan_devs < 4 * VK_MAX_DEVICES)
            vk_reg.orphan_devs[vk_reg.n_orphan_devs++] = vk_reg.devs[i];
        vk_reg.devs[i] = NULL;
    }
    vk_reg.inst = VK_NULL_HANDLE;
    vk_reg.inst_refs = 0;
    vk_reg.found = false;
    vk_reg.msgr = VK_NULL_HANDLE;
}
static void vk_fork_register(void) { pthread_atfork(vk_fork_prepare, vk_fork_parent, vk_fork_child); }

/* Every entry into the registry: the lock, with the fork handlers in place. */
static void vk_reg_lock(void) {
    pthread_once(&vk_fork_once, vk_fork_register);
    pthread_mutex_lock(&vk_reg.lock);
}

static _Atomic uint64_t vk_n_validation_errors;
static _Thread_local char *vk_cap_buf;
static _Thread_local size_t vk_cap_n;

uint64_t vk_validation_errors(void) { return atomic_load(&vk_n_validation_errors); }

void vk_capture_messages(char *buf, size_t n) {
    vk_cap_buf = buf;
    vk_cap_n = n;
    if (buf && n) buf[0] = 0;
}

static bool vk_env_on(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* ---- messages ---------------------------------------------------------------- */

static VKAPI_ATTR VkBool32 VKAPI_CALL vk_debug_cb(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                                  VkDebugUtilsMessageTypeFlagsEXT types,
                                                  const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
    const char *msg = data && data->pMessage ? data->pMessage : "(no message)";
    if (sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
        atomic_fetch_add(&vk_n_validation_errors, 1);
        TSL_LOGE("vulkan validation: %s", msg);
    } else if (sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
        TSL_LOGW("vulkan validation: %s", msg);
    } else {
        TSL_LOGD("vulkan: %s", msg);
    }
    if (vk_cap_buf && vk_cap_n > 1) {
        size_t len = strlen(vk_cap_buf);
        if (len + 1 < vk_cap_n) snprintf(vk_cap_buf + len, vk_cap_n - len, "%s%s", len ? "; " : "", msg);
    }
    /* An error means the call is invalid: the layer then stops it from
     * reaching the driver (VK_ERROR_VALIDATION_FAILED_EXT) rather than let
     * it run into undefined behaviour. */
    return (sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) ? VK_TRUE : VK_FALSE;
}

/* ---- instance ------------------------------------------------------------------ */

/* Is layer `name` installed; its specVersion into *version. */
static bool vk_has_layer(const char *name, uint32_t *version) {
    uint32_t n = 0;
    if (vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0) return false;
    VkLayerProperties *p = calloc(n, sizeof *p);
    if (!p) return false;
    bool found = false;
    if (vkEnumerateInstanceLayerProperties(&n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++)
            if (strcmp(p[i].layerName, name) == 0) {
                found = true;
                *version = p[i].specVersion;
            }
    free(p);
    return found;
}

static bool vk_has_instance_ext(const char *layer, const char *name) {
    uint32_t n = 0;
    if (vkEnumerateInstanceExtensionProperties(layer, &n, NULL) != VK_SUCCESS || n == 0) return false;
    VkExtensionProperties *p = calloc(n, sizeof *p);
    if (!p) return false;
    bool found = false;
    if (vkEnumerateInstanceExtensionProperties(layer, &n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++) found = strcmp(p[i].extensionName, name) == 0;
    free(p);
    return found;
}

/* Take a reference on the instance, creating it. Registry lock held. */
static VkResult vk_instance_get(void) {
    if (vk_reg.inst) {
        vk_reg.inst_refs++;
        return VK_SUCCESS;
    }
    vk_reg.found = false;
    const char *layers[1];
    const char *exts[1];
    uint32_t n_layers = 0, n_exts = 0;
    bool validate = vk_env_on("TSL_VULKAN_VALIDATE");
    if (validate) {
        if (vk_has_layer("VK_LAYER_KHRONOS_validation", &vk_reg.layer_version)) {
            layers[n_layers++] = "VK_LAYER_KHRONOS_validation";
        } else {
            TSL_LOGW("TSL_VULKAN_VALIDATE is set but the Khronos validation layer is not installed "
                     "(Debian: vulkan-validationlayers); running without it");
            validate = false;
        }
    }
    bool debug_utils = validate && (vk_has_instance_ext(NULL, VK_EXT_DEBUG_UTILS_EXTENSION_NAME) ||
                                    vk_has_instance_ext("VK_LAYER_KHRONOS_validation",
                                                        VK_EXT_DEBUG_UTILS_EXTENSION_NAME));
    if (debug_utils) exts[n_exts++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
        .pApplicationName = "tensile",
        .applicationVersion = VK_MAKE_API_VERSION(0, TSL_VERSION_MAJOR, TSL_VERSION_MINOR, TSL_VERSION_PATCH),
        .pEngineName = "tensile",
        .engineVersion = VK_MAKE_API_VERSION(0, TSL_VERSION_MAJOR, TSL_VERSION_MINOR, TSL_VERSION_PATCH),
        .apiVersion = VK_API_VERSION_1_2,
    };
    /* 1.3 where the loader has it (SPIR-V 1.6 kernels, on devices that
     * have 1.3 too); the backend asks nothing else of 1.3 */
    uint32_t loader = VK_API_VERSION_1_0;
    if (vkEnumerateInstanceVersion(&loader) == VK_SUCCESS && loader >= VK_API_VERSION_1_3)
        app.apiVersion = VK_API_VERSION_1_3;
    vk_reg.api = app.apiVersion;
    VkDebugUtilsMessengerCreateInfoEXT mci = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
        .pfnUserCallback = vk_debug_cb,
    };
    VkInstanceCreateInfo ici = {
        .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
        .pNext = debug_utils ? &mci : NULL, /* messages from instance creation itself */
        .pApplicationInfo = &app,
        .enabledLayerCount = n_layers,
        .ppEnabledLayerNames = layers,
        .enabledExtensionCount = n_exts,
        .ppEnabledExtensionNames = exts,
    };
    VkInstance inst = VK_NULL_HANDLE;
    VkResult r = vkCreateInstance(&ici, NULL, &inst);
    if (r != VK_SUCCESS) return r;
    vk_reg.inst = inst;
    vk_reg.inst_refs = 1;
    vk_reg.validate = validate;
    vk_reg.msgr = VK_NULL_HANDLE;
    if (debug_utils) {
        PFN_vkCreateDebugUtilsMessengerEXT create =
            (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(inst, "vkCreateDebugUtilsMessengerEXT");
        if (create && create(inst, &mci, NULL, &vk_reg.msgr) != VK_SUCCESS) vk_reg.msgr = VK_NULL_HANDLE;
    }
    if (validate) TSL_LOGI("vulkan: validation layer on");
    return VK_SUCCESS;
}

/* Registry lock held. An instance that found a device is kept for the
 * life of the process: the loader unloads the drivers with the last
 * instance, and drivers keep one-time state (made while enumerating) that
 * would then be unreachable, and loading one again costs milliseconds. One
 * that found none goes, so a later look (e.g. after VK_DRIVER_FILES was
 * set) starts afresh. */
static void vk_instance_put(void) {
    if (--vk_reg.inst_refs > 0) return;
    if (vk_reg.found) {
        vk_reg.inst_refs = 0;
        return;
    }
    if (vk_reg.msgr) {
        PFN_vkDestroyDebugUtilsMessengerEXT destroy = (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(
            vk_reg.inst, "vkDestroyDebugUtilsMessengerEXT");
        if (destroy) destroy(vk_reg.inst, vk_reg.msgr, NULL);
        vk_reg.msgr = VK_NULL_HANDLE;
    }
    vkDestroyInstance(vk_reg.inst, NULL);
    vk_reg.inst = VK_NULL_HANDLE;
    vk_reg.inst_refs = 0;
}

/* ---- physical devices ----------------------------------------------------------- */

static int vk_compute_family(VkPhysicalDevice pd) {
    uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, NULL);
    if (n == 0) return -1;
    VkQueueFamilyProperties *q = calloc(n, sizeof *q);
    if (!q) return -1;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, q);
    int best = -1;
    /* a compute-only family first (it tends to be the async compute engine),
     * else any family with compute */
    for (uint32_t i = 0; i < n; i++) {
        if (!(q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) || q[i].queueCount == 0) continue;
        if (!(q[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) {
            best = (int)i;
            break;
        }
        if (best < 0) best = (int)i;
    }
    free(q);
    return best;
}

/* The usable physical devices (Vulkan 1.2, a compute queue), in the
 * driver's order; returns how many (at most max). */
static int vk_usable(VkInstance inst, VkPhysicalDevice *out, int max) {
    uint32_t n = 0;
    if (vkEnumeratePhysicalDevices(inst, &n, NULL) != VK_SUCCESS || n == 0) return 0;
    VkPhysicalDevice *all = calloc(n, sizeof *all);
    if (!all) return 0;
    int k = 0;
    if (vkEnumeratePhysicalDevices(inst, &n, all) == VK_SUCCESS || n > 0) {
        for (uint32_t i = 0; i < n && k < max; i++) {
            VkPhysicalDeviceProperties p;
            vkGetPhysicalDeviceProperties(all[i], &p);
            if (p.apiVersion < VK_API_VERSION_1_2) {
                TSL_LOGI("vulkan: skipping %s (Vulkan %u.%u; 1.2 is needed)", p.deviceName,
                         VK_API_VERSION_MAJOR(p.apiVersion), VK_API_VERSION_MINOR(p.apiVersion));
                continue;
            }
            if (vk_compute_family(all[i]) < 0) continue;
            out[k++] = all[i];
        }
    }
    free(all);
    if (k > 0) vk_reg.found = true;
    return k;
}

static bool vk_has_ext(const VkExtensionProperties *e, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(e[i].extensionName, name) == 0) return true;
    return false;
}

static const char *vk_type_name(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
    }
}

/* The subgroup-scope shapes of VK_KHR_cooperative_matrix, without
 * saturation; none (and the feature off) when the query fails. */
static void vk_query_coopmat(VkPhysicalDevice pd, vk_features *f) {
    f->n_coopmat = 0;
    VkInstance inst = vk_reg.inst; /* callers hold a reference */
    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR get =
        inst ? (PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)vkGetInstanceProcAddr(
                   inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")
             : NULL;
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR q = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
    VkPhysicalDeviceFeatures2 qf = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &q};
    vkGetPhysicalDeviceFeatures2(pd, &qf);
    uint32_t n = 0;
    if (!get || !q.cooperativeMatrix || get(pd, &n, NULL) != VK_SUCCESS || n == 0) {
        f->cooperative_matrix = false;
        return;
    }
    VkCooperativeMatrixPropertiesKHR *p = calloc(n, sizeof *p);
    if (!p) {
        f->cooperative_matrix = false;
        return;
    }
    for (uint32_t i = 0; i < n; i++) p[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR;
    if (get(pd, &n, p) == VK_SUCCESS) {
        for (uint32_t i = 0; i < n && f->n_coopmat < VK_MAX_COOPMAT_SHAPES; i++) {
            if (p[i].scope != VK_SCOPE_SUBGROUP_KHR || p[i].saturatingAccumulation) continue;
            if (p[i].CType != p[i].ResultType) continue;
            f->coopmat[f->n_coopmat++] = (vk_coopmat_shape){.m = p[i].MSize, .n = p[i].NSize, .k = p[i].KSize,
                                                            .a = p[i].AType, .b = p[i].BType, .c = p[i].CType};
        }
    }
    free(p);
    if (f->n_coopmat == 0) f->cooperative_matrix = false;
}

/* VK_NV_cooperative_matrix2 postdates Debian 12's Vulkan headers (1.3.239). */
#define VK_STYPE_CM2_FEATURES_NV ((VkStructureType)1000593000)
#define VK_STYPE_CM2_PROPERTIES_NV ((VkStructureType)1000593002)
typedef struct {
    VkStructureType sType;
    void *pNext;
    VkBool32 workgroupScope, flexibleDimensions, reductions, conversions, perElementOperations, tensorAddressing,
        blockLoads;
} vk_cm2_features;
typedef struct {
    VkStructureType sType;
    void *pNext;
    uint32_t workgroupScopeMaxWorkgroupSize, flexibleDimensionsMaxDimension, workgroupScopeReservedSharedMemory;
} vk_cm2_properties;

/* Workgroup-scope matrices with flexible dimensions and tensor addressing,
 * what mul_mat_cm2.comp uses; f->coopmat2 stays false without them. */
static void vk_query_coopmat2(VkPhysicalDevice pd, vk_features *f) {
    vk_cm2_features q = {.sType = VK_STYPE_CM2_FEATURES_NV};
    /* maintenance4: the kernels' workgroup size is a specialization
     * constant, which SPIR-V 1.6 declares with LocalSizeId */
    VkPhysicalDeviceVulkan13Features q13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES, .pNext = &q};
    VkPhysicalDeviceFeatures2 qf = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &q13};
    vkGetPhysicalDeviceFeatures2(pd, &qf);
    vk_cm2_properties p = {.sType = VK_STYPE_CM2_PROPERTIES_NV};
    VkPhysicalDeviceProperties2 pp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &p};
    vkGetPhysicalDeviceProperties2(pd, &pp);
    f->coopmat2 = q.workgroupScope && q.flexibleDimensions && q.tensorAddressing && q.conversions &&
                  q13.maintenance4 && p.workgroupScopeMaxWorkgroupSize > 0;
    f->coopmat2_max_wg = f->coopmat2 ? p.workgroupScopeMaxWorkgroupSize : 0;
}

/* Everything the backend wants to know about pd, without creating a device. */
static void vk_query(VkPhysicalDevice pd, int index, tsl_vulkan_device_info *info, vk_features *f) {
    memset(info, 0, sizeof *info);
    memset(f, 0, sizeof *f);
    VkPhysicalDeviceVulkan11Properties p11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES};
    VkPhysicalDeviceVulkan12Properties p12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES,
                                              .pNext = &p11};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &p12};
    vkGetPhysicalDeviceProperties2(pd, &p2);
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .pNext = &f11};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12};
    vkGetPhysicalDeviceFeatures2(pd, &f2);

    uint32_t ne = 0;
    VkExtensionProperties *exts = NULL;
    if (vkEnumerateDeviceExtensionProperties(pd, NULL, &ne, NULL) == VK_SUCCESS && ne > 0) {
        exts = calloc(ne, sizeof *exts);
        if (!exts || vkEnumerateDeviceExtensionProperties(pd, NULL, &ne, exts) != VK_SUCCESS) ne = 0;
    }
    f->storage_16bit = f11.storageBuffer16BitAccess;
    f->float16 = f12.shaderFloat16;
    f->int8 = f12.shaderInt8;
    f->storage_8bit = f12.storageBuffer8BitAccess;
    f->float64 = f2.features.shaderFloat64;
    f->int16 = f2.features.shaderInt16;
    f->int64 = f2.features.shaderInt64;
    f->timeline_semaphore = f12.timelineSemaphore;
    f->buffer_device_address = f12.bufferDeviceAddress;
    f->vulkan_memory_model = f12.vulkanMemoryModel;
    f->subgroup_size = p11.subgroupSize;
    f->subgroup_basic = (p11.subgroupSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                        (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT);
    f->subgroup_arith = f->subgroup_basic && (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
    f->subgroup_shuffle = f->subgroup_basic && (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
    f->push_descriptors = vk_has_ext(exts, ne, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
    f->cooperative_matrix = vk_has_ext(exts, ne, "VK_KHR_cooperative_matrix");
    f->device_fault = vk_has_ext(exts, ne, VK_EXT_DEVICE_FAULT_EXTENSION_NAME);
    f->nv_checkpoints = vk_has_ext(exts, ne, VK_NV_DEVICE_DIAGNOSTIC_CHECKPOINTS_EXTENSION_NAME);
    f->robustness2 = vk_has_ext(exts, ne, VK_EXT_ROBUSTNESS_2_EXTENSION_NAME);
    if (vk_has_ext(exts, ne, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME)) {
        VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR qd = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR};
        VkPhysicalDeviceFeatures2 qf = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &qd};
        vkGetPhysicalDeviceFeatures2(pd, &qf);
        VkPhysicalDeviceShaderIntegerDotProductPropertiesKHR pd4 = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES_KHR};
        VkPhysicalDeviceProperties2 pp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &pd4};
        vkGetPhysicalDeviceProperties2(pd, &pp);
        f->int_dot = qd.shaderIntegerDotProduct;
        f->int_dot_fast = f->int_dot && pd4.integerDotProduct4x8BitPackedSignedAccelerated;
    }
    const bool has_cm2 = vk_has_ext(exts, ne, "VK_NV_cooperative_matrix2");
    free(exts);
    if (f->cooperative_matrix) vk_query_coopmat(pd, f);
    f->spirv_1_6 = p2.properties.apiVersion >= VK_API_VERSION_1_3 && vk_reg.api >= VK_API_VERSION_1_3;
    if (has_cm2 && f->cooperative_matrix && f->spirv_1_6) vk_query_coopmat2(pd, f);

    const VkPhysicalDeviceProperties *p = &p2.properties;
    info->index = index;
    snprintf(info->name, sizeof info->name, "%.95s", p->deviceName);
    snprintf(info->type, sizeof info->type, "%s", vk_type_name(p->deviceType));
    snprintf(info->driver, sizeof info->driver, "%.47s %.47s", p12.driverName, p12.driverInfo);
    info->api_version = p->apiVersion;
    info->vendor_id = p->vendorID;
    info->device_id = p->deviceID;
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(pd, &mp);
    for (uint32_t i = 0; i < mp.memoryHeapCount; i++)
        if ((mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
            mp.memoryHeaps[i].size > info->device_local_bytes)
            info->device_local_bytes = mp.memoryHeaps[i].size;
    info->max_allocation_bytes = p11.maxMemoryAllocationSize;
    info->max_storage_buffer_range = p->limits.maxStorageBufferRange;
    info->max_shared_memory = p->limits.maxComputeSharedMemorySize;
    info->subgroup_size = f->subgroup_size;
    info->subgroup_arithmetic = f->subgroup_arith;
    info->storage_16bit = f->storage_16bit;
    info->float16 = f->float16;
    info->int8 = f->int8;
    info->float64 = f->float64;
    info->push_descriptors = f->push_descriptors;
    info->timeline_semaphore = f->timeline_semaphore;
    info->cooperative_matrix = f->cooperative_matrix;
    info->cooperative_matrix2 = f->coopmat2;
    info->device_fault = f->device_fault;
    info->nv_checkpoints = f->nv_checkpoints;
    info->robustness2 = f->robustness2;
    info->integer_dot = f->int_dot;
    info->integer_dot_fast = f->int_dot_fast;
    info->buffer_device_address = f->buffer_device_address;
}

/* ---- public queries ------------------------------------------------------------- */

int tsl_vulkan_device_count(void) {
    vk_reg_lock();
    int n = 0;
    if (vk_instance_get() == VK_SUCCESS) {
        VkPhysicalDevice pds[VK_MAX_DEVICES];
        n = vk_usable(vk_reg.inst, pds, VK_MAX_DEVICES);
        vk_instance_put();
    }
    pthread_mutex_unlock(&vk_reg.lock);
    return n;
}

tsl_status tsl_vulkan_device_info_get(int index, tsl_vulkan_device_info *info, tsl_error *err) {
    if (!info) return error_set(err, TSL_FAILED, "vulkan", "", -1, NULL, NULL, "vulkan_device_info: info is NULL");
    vk_reg_lock();
    VkResult r = vk_instance_get();
    if (r != VK_SUCCESS) {
        pthread_mutex_unlock(&vk_reg.lock);
        return error_set(err, TSL_FAILED, "vulkan", "", -1, NULL, NULL,
                         "no Vulkan instance could be created (VkResult %d): no loader or driver", (int)r);
    }
    VkPhysicalDevice pds[VK_MAX_DEVICES];
    int n = vk_usable(vk_reg.inst, pds, VK_MAX_DEVICES);
    tsl_status s = TSL_SUCCESS;
    if (index < 0 || index >= n) {
        s = error_set(err, TSL_FAILED, "vulkan", "", -1, NULL, NULL, "no Vulkan device %d (there are %d)", index, n);
    } else {
        vk_features f;
        vk_query(pds[index], index, info, &f);
    }
    vk_instance_put();
    pthread_mutex_unlock(&vk_reg.lock);
    return s;
}

int vk_device_pick(tsl_error *err) {
    const char *env = getenv("TSL_VULKAN_DEVICE");
    vk_reg_lock();
    VkResult r = vk_instance_get();
    if (r != VK_SUCCESS) {
        pthread_mutex_unlock(&vk_reg.lock);
        error_set(err, TSL_FAILED, "vulkan", "", -1, NULL, NULL,
                  "no Vulkan instance could be created (VkResult %d): no Vulkan loader or driver "
                  "(Debian: mesa-vulkan-drivers for a CPU device)",
                  (int)r);
        return -1;
    }
    VkPhysicalDevice pds[VK_MAX_DEVICES];
    int n = vk_usable(vk_reg.inst, pds, VK_MAX_DEVICES);
    int pick = -1;
    if (env && *env) {
        char *end = NULL;
        long v = strtol(env, &end, 10);
        if (!end || *end || v < 0 || v >= n)
            error_set(err, TSL_FAILED, "vulkan", "", -1, NULL, NULL,
                      "TSL_VULKAN_DEVICE=%s names no Vulkan device (there are %d)", env, n);
        else
            pick = (int)v;
    } else if (n == 0) {
        error_set(err, TSL_FAILED, "vulkan", "", -1, NULL, NULL,
                  "no Vulkan 1.2 device with a compute queue was found (a GPU driver, or Mesa's lavapipe "
                  "from mesa-vulkan-drivers, is needed)");
    } else {
        static const VkPhysicalDeviceType order[] = {VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU,
                                                     VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU,
                                                     VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU, VK_PHYSICAL_DEVICE_TYPE_CPU};
        for (size_t o = 0; o < sizeof order / sizeof order[0] && pick < 0; o++)
            for (int i = 0; i < n && pick < 0; i++) {
                VkPhysicalDeviceProperties p;
                vkGetPhysicalDeviceProperties(pds[i], &p);
                if (p.deviceType == order[o]) pick = i;
            }
        if (pick < 0) pick = 0;
    }
    vk_instance_put();
    pthread_mutex_unlock(&vk_reg.lock);
    return pick;
}

/* ---- errors ------------------------------------------------------------------------ */

const char *vk_result_name(VkResult r, tsl_fault_phase phase) {
    const char *name = "unknown";
    tsl_fault_classify("VkResult", (int64_t)r, phase, &name);
    return name;
}

tsl_status vk_error(tsl_error *err, VkResult r, tsl_fault_phase phase, const char *backend, const char *device,
                    int node, const tsl_tensor *t, const char *kernel, const char *what) {
    const char *name = "unknown";
    tsl_status s = tsl_fault_classify("VkResult", (int64_t)r, phase, &name);
    if (s == TSL_SUCCESS) s = TSL_DEVICE_LOST; /* a success code is no failure: never reached */
    error_set(err, s, backend, device, node, t, kernel, "%s failed", what);
    if (err) {
        snprintf(err->driver_domain, sizeof err->driver_domain, "VkResult");
        err->driver_code = (int64_t)r;
        snprintf(err->driver_text, sizeof err->driver_text, "%s", name);
    }
    return s;
}

/* ---- loss ----------------------------------------------------------------------------- */

bool vk_device_is_lost(const vk_device *d) { return backend_dev_check(d->bdev, NULL) != TSL_SUCCESS; }

int vk_device_checkpoint_node(vk_device *d) {
    if (!d->get_checkpoints) return -1;
    uint32_t n = 0;
    pthread_mutex_lock(&d->qlock);
    d->get_checkpoints(d->queue, &n, NULL);
    int node = -1;
    if (n > 0 && n < 4096) {
        VkCheckpointDataNV *cp = calloc(n, sizeof *cp);
        if (cp) {
            for (uint32_t i = 0; i < n; i++) cp[i].sType = VK_STRUCTURE_TYPE_CHECKPOINT_DATA_NV;
            d->get_checkpoints(d->queue, &n, cp);
            /* markers are node index + 1; the latest one any stage reached is
             * the node that was running */
            for (uint32_t i = 0; i < n; i++) {
                int v = (int)(uintptr_t)cp[i].pCheckpointMarker - 1;
                if (v > node) node = v;
            }
            free(cp);
        }
    }
    pthread_mutex_unlock(&d->qlock);
    return node;
}

/* What VK_EXT_device_fault says, appended to e's message and driver text. */
static void vk_read_device_fault(vk_device *d, tsl_error *e) {
    if (!d->get_fault_info) return;
    VkDeviceFaultCountsEXT counts = {.sType = VK_STRUCTURE_TYPE_DEVICE_FAULT_COUNTS_EXT};
    if (d->get_fault_info(d->dev, &counts, NULL) != VK_SUCCESS) return;
    VkDeviceFaultAddressInfoEXT *addr = NULL;
    VkDeviceFaultVendorInfoEXT *vendor = NULL;
    if (counts.addressInfoCount) addr = calloc(counts.addressInfoCount, sizeof *addr);
    if (counts.vendorInfoCount) vendor = calloc(counts.vendorInfoCount, sizeof *vendor);
    if ((counts.addressInfoCount && !addr) || (counts.vendorInfoCount && !vendor)) {
        free(addr);
        free(vendor);
        return;
    }
    counts.vendorBinarySize = 0;
    VkDeviceFaultInfoEXT info = {.sType = VK_STRUCTURE_TYPE_DEVICE_FAULT_INFO_EXT,
                                 .pAddressInfos = addr,
                                 .pVendorInfos = vendor};
    VkResult r = d->get_fault_info(d->dev, &counts, &info);
    if (r == VK_SUCCESS || r == VK_INCOMPLETE) {
        char extra[192];
        int k = snprintf(extra, sizeof extra, "device fault: %s", info.description[0] ? info.description : "(no description)");
        if (addr && counts.addressInfoCount > 0 && k > 0 && (size_t)k < sizeof extra)
            snprintf(extra + k, sizeof extra - (size_t)k, " at 0x%" PRIx64, (uint64_t)addr[0].reportedAddress);
        size_t len = strlen(e->message);
        if (len + 3 < sizeof e->message) snprintf(e->message + len, sizeof e->message - len, "; %s", extra);
        snprintf(e->driver_text, sizeof e->driver_text, "%.127s", extra);
    }
    free(addr);
    free(vendor);
}

tsl_status vk_device_set_lost(vk_device *d, tsl_error *cause) {
    cause->status = TSL_DEVICE_LOST;
    if (!vk_device_is_lost(d) && cause->driver_code == VK_ERROR_DEVICE_LOST) vk_read_device_fault(d, cause);
    backend_dev_latch(d->bdev, cause);
    return TSL_DEVICE_LOST;
}

tsl_status vk_device_lost_error(const vk_device *d, tsl_error *err) {
    if (backend_dev_check(d->bdev, err) == TSL_SUCCESS && err) /* (not lost: never asked then) */
        error_set(err, TSL_DEVICE_LOST, "vulkan", d->name, -1, NULL, NULL, "the device was lost");
    return TSL_DEVICE_LOST;
}

/* ---- device objects --------------------------------------------------------------- */

/* The pipeline and descriptor-set layouts of d's VkDevice, gone (NULL). */
static void vk_layouts_destroy(vk_device *d) {
    if (d->layout_sets) vkDestroyPipelineLayout(d->dev, d->layout_sets, NULL);
    if (d->dsl_sets) vkDestroyDescriptorSetLayout(d->dev, d->dsl_sets, NULL);
    if (d->layout) vkDestroyPipelineLayout(d->dev, d->layout, NULL);
    if (d->dsl) vkDestroyDescriptorSetLayout(d->dev, d->dsl, NULL);
    d->layout_sets = VK_NULL_HANDLE;
    d->dsl_sets = VK_NULL_HANDLE;
    d->layout = VK_NULL_HANDLE;
    d->dsl = VK_NULL_HANDLE;
}

static void vk_device_destroy(vk_device *d) {
    if (atomic_load(&d->unclean)) {
        /* Work a backend submitted never finished: destroying objects the
         * GPU may still use would wait on it (vkDestroyDevice waits for
         * idle). Leak them instead. */
        TSL_LOGW("vulkan%d: device %s did not finish its work; its Vulkan objects are left allocated rather "
                 "than waited on",
                 d->index, d->name);
        return;
    }
    vk_graves_collect(d, true);
    if (d->graves) return; /* left allocated: an old device never finished (logged) */
    if (d->dev) {
        vk_pipeline_fini(d);
        vk_mem_fini(d);
        vk_layouts_destroy(d);
        vkDestroyDevice(d->dev, NULL);
    } else {
        vk_pipeline_fini(d); /* replacement SPIR-V may be held without a device */
    }
    pthread_mutex_destroy(&d->blist_lock);
    pthread_mutex_destroy(&d->qlock);
    pthread_mutex_destroy(&d->klock);
    pthread_mutex_destroy(&d->mlock);
    backend_dev_release(d->bdev);
    free(d);
}

static tsl_status vk_device_open(vk_device *d, tsl_error *err);

/* Create the device object for pd. Registry lock held. */
static vk_device *vk_device_create(VkPhysicalDevice pd, int index, tsl_error *err) {
    vk_device *d = calloc(1, sizeof *d);
    if (!d) {
        error_set(err, TSL_ALLOC_FAILED, "vulkan", "", -1, NULL, NULL, "out of host memory for the device object");
        return NULL;
    }
    d->index = index;
    d->pd = pd;
    pthread_mutex_init(&d->qlock, NULL);
    pthread_mutex_init(&d->klock, NULL);
    pthread_mutex_init(&d->mlock, NULL);
    pthread_mutex_init(&d->blist_lock, NULL);
    d->bdev = backend_dev_new();
    if (!d->bdev) {
        error_set(err, TSL_ALLOC_FAILED, "vulkan", "", -1, NULL, NULL, "out of host memory for the device object");
        vk_device_destroy(d);
        return NULL;
    }
    vkGetPhysicalDeviceProperties(pd, &d->props);
    vkGetPhysicalDeviceMemoryProperties(pd, &d->memprops);
    vk_query(pd, index, &d->info, &d->f);
    snprintf(d->name, sizeof d->name, "%.95s", d->props.deviceName);
    if (vk_device_open(d, err) != TSL_SUCCESS || vk_mem_init(d, err) != TSL_SUCCESS ||
        vk_pipeline_init(d, err) != TSL_SUCCESS) {
        vk_device_destroy(d);
        return NULL;
    }
    TSL_LOGI("vulkan%d: %s (%s, Vulkan %u.%u, subgroup %u%s%s%s)", index, d->name, d->info.type,
             VK_API_VERSION_MAJOR(d->props.apiVersion), VK_API_VERSION_MINOR(d->props.apiVersion), d->f.subgroup_size,
             d->f.push_descriptors ? ", push descriptors" : "", d->f.device_fault ? ", device fault" : "",
             d->f.robust_access ? ", robust access" : "");
    return d;
}

/* The VkDevice, its queue, the extension entry points and the one pipeline
 * layout, on d's physical device. On failure d->dev is NULL and what was
 * made is gone. Used at creation and by recovery. */
static tsl_status vk_device_open(vk_device *d, tsl_error *err) {
    VkPhysicalDevice pd = d->pd;
    int index = d->index;
    char bname[32];
    snprintf(bname, sizeof bname, "vulkan%d", index);

    int fam = vk_compute_family(pd);
    d->qfam = (uint32_t)fam;
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                   .queueFamilyIndex = d->qfam,
                                   .queueCount = 1,
                                   .pQueuePriorities = &prio};

    const char *exts[12];
    uint32_t n_exts = 0;
    if (d->f.push_descriptors && vk_env_on("TSL_VULKAN_NO_PUSH_DESCRIPTORS")) d->f.push_descriptors = false;
    if (d->f.push_descriptors) exts[n_exts++] = VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME;
    if (d->f.device_fault) exts[n_exts++] = VK_EXT_DEVICE_FAULT_EXTENSION_NAME;
    /* TSL_VULKAN_CHECKPOINTS=N: an NV checkpoint at the start of every N-th
     * level of dispatches as well (a loss is placed within N levels by them
     * too); 0, the default: none. The progress word every kernel raises
     * (common.glsl) names the running level without them and costs nothing
     * measurable; a checkpoint at every level cost 13% of an 8B decode
     * token on the H200 (bench/RESULTS.md, run 56). */
    d->cp_every = 0;
    const char *cpe = getenv("TSL_VULKAN_CHECKPOINTS");
    if (cpe && *cpe) {
        char *end;
        long v = strtol(cpe, &end, 10);
        if (*end == '\0' && v >= 0 && v <= 1000000)
            d->cp_every = (int)v;
        else
            TSL_LOGW("vulkan: TSL_VULKAN_CHECKPOINTS=%s ignored: not a count of levels (0 turns them off)", cpe);
    }
    if (d->cp_every == 0) d->f.nv_checkpoints = false;
    if (d->f.nv_checkpoints) exts[n_exts++] = VK_NV_DEVICE_DIAGNOSTIC_CHECKPOINTS_EXTENSION_NAME;
    bool checked = vk_env_on("TSL_VULKAN_CHECKED");
    bool robust2 = checked && d->f.robustness2;
    if (robust2) exts[n_exts++] = VK_EXT_ROBUSTNESS_2_EXTENSION_NAME;
    /* A validation layer older than VK_KHR_cooperative_matrix (1.3.255;
     * Debian 12 ships 1.3.239) rejects its feature struct as unknown and
     * fails device creation: validate without cooperative matrices then. */
    if (d->f.cooperative_matrix && vk_reg.validate && vk_reg.layer_version < VK_MAKE_API_VERSION(0, 1, 3, 255)) {
        TSL_LOGW("vulkan: cooperative matrices off while validating: the validation layer (%u.%u.%u) predates "
                 "VK_KHR_cooperative_matrix",
                 VK_API_VERSION_MAJOR(vk_reg.layer_version), VK_API_VERSION_MINOR(vk_reg.layer_version),
                 VK_API_VERSION_PATCH(vk_reg.layer_version));
        d->f.cooperative_matrix = false;
        d->f.n_coopmat = 0;
        d->info.cooperative_matrix = false;
    }
    if (!d->f.cooperative_matrix) d->f.coopmat2 = d->info.cooperative_matrix2 = false;
    if (d->f.cooperative_matrix) exts[n_exts++] = "VK_KHR_cooperative_matrix";
    if (d->f.coopmat2) exts[n_exts++] = "VK_NV_cooperative_matrix2";
    if (d->f.int_dot && vk_env_on("TSL_VULKAN_NO_INTEGER_DOT")) d->f.int_dot = d->info.integer_dot = false;
    if (d->f.float64 && vk_env_on("TSL_VULKAN_NO_FLOAT64")) d->f.float64 = d->info.float64 = false;
    if (d->f.int_dot) exts[n_exts++] = VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME;
    /* TSL_VULKAN_PIPELINE_STATS=1: the driver's statistics of each pipeline
     * it builds (registers, local memory, ...), logged; a tuning aid */
    d->f.exec_stats = vk_env_on("TSL_VULKAN_PIPELINE_STATS") && n_exts < 12;
    if (d->f.exec_stats) {
        uint32_t nx = 0;
        VkExtensionProperties *xs = NULL;
        bool has = false;
        if (vkEnumerateDeviceExtensionProperties(pd, NULL, &nx, NULL) == VK_SUCCESS && nx > 0 &&
            (xs = calloc(nx, sizeof *xs)) && vkEnumerateDeviceExtensionProperties(pd, NULL, &nx, xs) == VK_SUCCESS)
            has = vk_has_ext(xs, nx, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
        free(xs);
        d->f.exec_stats = has;
        if (has) exts[n_exts++] = VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME;
        else TSL_LOGW("vulkan: TSL_VULKAN_PIPELINE_STATS: the device has no VK_KHR_pipeline_executable_properties");
    }

    VkPhysicalDeviceFeatures2 avail2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    vkGetPhysicalDeviceFeatures2(pd, &avail2);

    VkPhysicalDeviceFaultFeaturesEXT ffault = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FAULT_FEATURES_EXT,
                                               .deviceFault = VK_TRUE};
    VkPhysicalDeviceRobustness2FeaturesEXT frob = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ROBUSTNESS_2_FEATURES_EXT,
                                                   .robustBufferAccess2 = VK_TRUE};
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                            .storageBuffer16BitAccess = d->f.storage_16bit};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .pNext = &f11,
                                            .shaderFloat16 = d->f.float16,
                                            .shaderInt8 = d->f.int8,
                                            .storageBuffer8BitAccess = d->f.storage_8bit,
                                            .bufferDeviceAddress = d->f.buffer_device_address,
                                            .vulkanMemoryModel = d->f.vulkan_memory_model,
                                            .vulkanMemoryModelDeviceScope = d->f.vulkan_memory_model};
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR fcm = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR, .cooperativeMatrix = VK_TRUE};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12};
    f2.features.shaderFloat64 = d->f.float64;
    f2.features.shaderInt16 = d->f.int16;
    f2.features.shaderInt64 = d->f.int64;
    void **tail = &f11.pNext;
    if (d->f.cooperative_matrix) {
        *tail = &fcm;
        tail = &fcm.pNext;
    }
    VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR fdot = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR,
        .shaderIntegerDotProduct = VK_TRUE};
    /* with VK_NV_cooperative_matrix2 the Vulkan 1.3 feature struct goes in
     * (maintenance4, below), which then carries integer dot products: a
     * chain may not hold both it and their own struct */
    if (d->f.int_dot && !d->f.coopmat2) {
        *tail = &fdot;
        tail = &fdot.pNext;
    }
    vk_cm2_features fcm2 = {.sType = VK_STYPE_CM2_FEATURES_NV,
                            .workgroupScope = VK_TRUE,
                            .flexibleDimensions = VK_TRUE,
                            .conversions = VK_TRUE,
                            .tensorAddressing = VK_TRUE};
    VkPhysicalDeviceVulkan13Features f13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES,
                                            .maintenance4 = VK_TRUE,
                                            .shaderIntegerDotProduct = d->f.int_dot};
    if (d->f.coopmat2) {
        *tail = &fcm2;
        tail = &fcm2.pNext;
        *tail = &f13;
        tail = &f13.pNext;
    }
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR fexe = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR,
        .pipelineExecutableInfo = VK_TRUE};
    if (d->f.exec_stats) {
        *tail = &fexe;
        tail = &fexe.pNext;
    }
    if (d->f.device_fault) {
        /* the feature struct is needed only when the extension is enabled */
        VkPhysicalDeviceFaultFeaturesEXT q = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FAULT_FEATURES_EXT};
        VkPhysicalDeviceFeatures2 qf = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &q};
        vkGetPhysicalDeviceFeatures2(pd, &qf);
        if (q.deviceFault) {
            *tail = &ffault;
            tail = &ffault.pNext;
        }
    }
    if (checked) {
        f2.features.robustBufferAccess = avail2.features.robustBufferAccess;
        d->f.robust_access = avail2.features.robustBufferAccess;
        if (robust2) {
            *tail = &frob;
            tail = &frob.pNext;
        }
    }
    VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                              .pNext = &f2,
                              .queueCreateInfoCount = 1,
                              .pQueueCreateInfos = &qci,
                              .enabledExtensionCount = n_exts,
                              .ppEnabledExtensionNames = exts};
    VkResult r = vkCreateDevice(pd, &dci, NULL, &d->dev);
    if (r != VK_SUCCESS) {
        d->dev = VK_NULL_HANDLE;
        return vk_error(err, r, TSL_PHASE_ALLOC, bname, d->name, -1, NULL, NULL, "creating the Vulkan device");
    }
    vkGetDeviceQueue(d->dev, d->qfam, 0, &d->queue);
    if (d->f.push_descriptors)
        d->push_descriptor_set =
            (PFN_vkCmdPushDescriptorSetKHR)vkGetDeviceProcAddr(d->dev, "vkCmdPushDescriptorSetKHR");
    if (!d->push_descriptor_set) d->f.push_descriptors = false;
    if (d->f.device_fault)
        d->get_fault_info = (PFN_vkGetDeviceFaultInfoEXT)vkGetDeviceProcAddr(d->dev, "vkGetDeviceFaultInfoEXT");
    if (d->f.nv_checkpoints) {
        d->set_checkpoint = (PFN_vkCmdSetCheckpointNV)vkGetDeviceProcAddr(d->dev, "vkCmdSetCheckpointNV");
        d->get_checkpoints =
            (PFN_vkGetQueueCheckpointDataNV)vkGetDeviceProcAddr(d->dev, "vkGetQueueCheckpointDataNV");
        if (!d->set_checkpoint || !d->get_checkpoints) d->set_checkpoint = NULL, d->get_checkpoints = NULL;
    }

    /* one layout for every kernel: VK_NBIND storage buffers and 128 bytes of
     * push constants, so encoders never switch layouts */
    VkDescriptorSetLayoutBinding b[VK_NBIND];
    for (int i = 0; i < VK_NBIND; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = (uint32_t)i,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1,
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo dl = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
        .flags = d->f.push_descriptors ? VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR : 0,
        .bindingCount = VK_NBIND,
        .pBindings = b};
    VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = VK_PC_WORDS * 4};
    r = vkCreateDescriptorSetLayout(d->dev, &dl, NULL, &d->dsl);
    VkPipelineLayoutCreateInfo pl = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                     .setLayoutCount = 1,
                                     .pSetLayouts = &d->dsl,
                                     .pushConstantRangeCount = 1,
                                     .pPushConstantRanges = &pcr};
    if (r == VK_SUCCESS) r = vkCreatePipelineLayout(d->dev, &pl, NULL, &d->layout);
    /* the same for kernels bound through ordinary sets (same push-constant
     * range: the two layouts are compatible for push constants) */
    if (r == VK_SUCCESS && d->f.push_descriptors) {
        dl.flags = 0;
        r = vkCreateDescriptorSetLayout(d->dev, &dl, NULL, &d->dsl_sets);
        pl.pSetLayouts = &d->dsl_sets;
        if (r == VK_SUCCESS) r = vkCreatePipelineLayout(d->dev, &pl, NULL, &d->layout_sets);
    }
    if (r != VK_SUCCESS) {
        vk_error(err, r, TSL_PHASE_ALLOC, bname, d->name, -1, NULL, NULL, "creating the pipeline layout");
        vk_layouts_destroy(d);
        vkDestroyDevice(d->dev, NULL);
        d->dev = VK_NULL_HANDLE;
        return err ? err->status : TSL_ALLOC_FAILED;
    }
    return TSL_SUCCESS;
}

/* ---- recovery ---------------------------------------------------------------- */

typedef struct vk_grave_obj {
    int kind;
    uint64_t h;
    bool pending; /* a fence whose work was submitted and not seen finished */
} vk_grave_obj;

/* What was made on a VkDevice that recovery replaced. */
struct vk_grave {
    VkDevice dev;
    bool hung;
    uint32_t gen;
    vk_block *blocks;
    VkDescriptorSetLayout dsl, dsl_sets;
    VkPipelineLayout layout, layout_sets;
    VkPipeline pipes[VK_K_COUNT];
    VkShaderModule mods[VK_K_COUNT];
    int n_pipes;
    vk_grave_obj *objs;
    int n_objs, cap_objs;
    bool oom;     /* an object could not be recorded: never destroy this grave */
    bool logged;
    vk_grave *next;
};

void vk_grave_add(vk_grave *gr, int kind, uint64_t handle, bool pending) {
    if (!handle) return;
    if (gr->n_objs == gr->cap_objs) {
        int cap = gr->cap_objs ? 2 * gr->cap_objs : 32;
        vk_grave_obj *o = realloc(gr->objs, (size_t)cap * sizeof *o);
        if (!o) {
            gr->oom = true; /* the object is lost track of: keep the whole device */
            return;
        }
        gr->objs = o;
        gr->cap_objs = cap;
    }
    gr->objs[gr->n_objs++] = (vk_grave_obj){kind, handle, pending};
}

void vk_grave_add_pipeline(vk_grave *gr, VkPipeline p, VkShaderModule m) {
    if (gr->n_pipes < VK_K_COUNT && (p || m)) {
        gr->pipes[gr->n_pipes] = p;
        gr->mods[gr->n_pipes] = m;
        gr->n_pipes++;
    }
}

/* Is everything submitted on the grave's device finished? Asks each
 * pending fence without waiting: a lost device, or a hung one that never
 * finishes, answers no (and is never waited on); one whose "hang" was only
 * slow work answers yes once the work is done. */
static bool vk_grave_idle(const vk_grave *gr) {
    if (gr->oom) return false;
    for (int i = 0; i < gr->n_objs; i++)
        if (gr->objs[i].kind == VK_GO_FENCE && gr->objs[i].pending &&
            vkGetFenceStatus(gr->dev, (VkFence)(uintptr_t)gr->objs[i].h) != VK_SUCCESS)
            return false;
    return true;
}

static void vk_grave_destroy(vk_grave *gr) {
    for (int i = 0; i < gr->n_objs; i++) {
        uint64_t h = gr->objs[i].h;
        switch (gr->objs[i].kind) {
        case VK_GO_CMDPOOL: vkDestroyCommandPool(gr->dev, (VkCommandPool)(uintptr_t)h, NULL); break;
        case VK_GO_FENCE: vkDestroyFence(gr->dev, (VkFence)(uintptr_t)h, NULL); break;
        case VK_GO_DPOOL: vkDestroyDescriptorPool(gr->dev, (VkDescriptorPool)(uintptr_t)h, NULL); break;
        case VK_GO_BUFFER: vkDestroyBuffer(gr->dev, (VkBuffer)(uintptr_t)h, NULL); break;
        case VK_GO_MEMORY: vkFreeMemory(gr->dev, (VkDeviceMemory)(uintptr_t)h, NULL); break;
        case VK_GO_QUERYPOOL: vkDestroyQueryPool(gr->dev, (VkQueryPool)(uintptr_t)h, NULL); break;
        default: break;
        }
    }
    for (int i = 0; i < gr->n_pipes; i++) {
        if (gr->pipes[i]) vkDestroyPipeline(gr->dev, gr->pipes[i], NULL);
        if (gr->mods[i]) vkDestroyShaderModule(gr->dev, gr->mods[i], NULL);
    }
    for (vk_block *b = gr->blocks, *n; b; b = n) {
        n = b->next;
        vk_block_destroy_on(gr->dev, b);
    }
    if (gr->layout) vkDestroyPipelineLayout(gr->dev, gr->layout, NULL);
    if (gr->dsl) vkDestroyDescriptorSetLayout(gr->dev, gr->dsl, NULL);
    if (gr->layout_sets) vkDestroyPipelineLayout(gr->dev, gr->layout_sets, NULL);
    if (gr->dsl_sets) vkDestroyDescriptorSetLayout(gr->dev, gr->dsl_sets, NULL);
    vkDestroyDevice(gr->dev, NULL);
    free(gr->objs);
    free(gr);
}

void vk_graves_collect(vk_device *d, bool final) {
    for (vk_grave **pp = &d->graves; *pp;) {
        vk_grave *gr = *pp;
        if (vk_grave_idle(gr)) {
            *pp = gr->next;
            vk_grave_destroy(gr);
            continue;
        }
        if (final && !gr->logged) {
            /* reachable from here until exit: a GPU that never finishes
             * must not be waited on */
            gr->logged = true;
            TSL_LOGW("vulkan%d: the device replaced by recovery %u did not finish its work; its objects are left "
                     "allocated",
                     d->index, gr->gen + 1);
        }
        if (final) atomic_store(&d->unclean, 1); /* keep the device object (it holds the list) */
        pp = &gr->next;
    }
}

tsl_status vk_device_reopen(vk_device *d, vk_grave **out, tsl_error *err) {
    vk_grave *gr = calloc(1, sizeof *gr);
    if (!gr)
        return error_set(err, TSL_ALLOC_FAILED, "vulkan", d->name, -1, NULL, NULL,
                         "recover: out of host memory");
    /* The new device first: if it cannot be had, nothing changes. The old
     * one is never waited on here (it may be hung). */
    gr->dev = d->dev;
    gr->dsl = d->dsl;
    gr->layout = d->layout;
    gr->dsl_sets = d->dsl_sets;
    gr->layout_sets = d->layout_sets;
    gr->hung = atomic_load(&d->hung) != 0;
    gr->gen = d->gen;
    PFN_vkCmdPushDescriptorSetKHR push = d->push_descriptor_set;
    PFN_vkGetDeviceFaultInfoEXT fault = d->get_fault_info;
    PFN_vkCmdSetCheckpointNV setcp = d->set_checkpoint;
    PFN_vkGetQueueCheckpointDataNV getcp = d->get_checkpoints;
    VkQueue queue = d->queue;
    vk_features f = d->f;
    d->dev = VK_NULL_HANDLE;
    d->dsl = d->dsl_sets = VK_NULL_HANDLE;
    d->layout = d->layout_sets = VK_NULL_HANDLE;
    tsl_status s = vk_device_open(d, err);
    if (s != TSL_SUCCESS) {
        d->dev = gr->dev;
        d->dsl = gr->dsl;
        d->layout = gr->layout;
        d->dsl_sets = gr->dsl_sets;
        d->layout_sets = gr->layout_sets;
        d->queue = queue;
        d->f = f;
        d->push_descriptor_set = push;
        d->get_fault_info = fault;
        d->set_checkpoint = setcp;
        d->get_checkpoints = getcp;
        free(gr);
        return s;
    }
    /* kernels and memory blocks of the old device go with it */
    atomic_fetch_add(&d->epoch, 1);
    vk_pipeline_detach(d, gr);
    pthread_mutex_lock(&d->mlock);
    gr->blocks = d->blocks;
    d->blocks = NULL;
    d->heap_used = 0;
    d->gen++;
    pthread_mutex_unlock(&d->mlock);
    atomic_store(&d->hung, 0);
    gr->next = d->graves;
    d->graves = gr;
    *out = gr;
    return TSL_SUCCESS;
}

vk_device *vk_device_acquire(int index, tsl_error *err) {
    if (index < 0 || index >= VK_MAX_DEVICES) {
        error_set(err, TSL_FAILED, "vulkan", "", -1, NULL, NULL, "no Vulkan device %d", index);
        return NULL;
    }
    vk_reg_lock();
    vk_device *d = vk_reg.devs[index];
    if (d) {
        d->refs++;
        pthread_mutex_unlock(&vk_reg.lock);
        return d;
    }
    VkResult r = vk_instance_get();
    if (r != VK_SUCCESS) {
        pthread_mutex_unlock(&vk_reg.lock);
        error_set(err, TSL_FAILED, "vulkan", "", -1, NULL, NULL,
                  "no Vulkan instance could be created (VkResult %d): no Vulkan loader or driver", (int)r);
        return NULL;
    }
    VkPhysicalDevice pds[VK_MAX_DEVICES];
    int n = vk_usable(vk_reg.inst, pds, VK_MAX_DEVICES);
    if (index >= n) {
        vk_instance_put();
        pthread_mutex_unlock(&vk_reg.lock);
        error_set(err, TSL_FAILED, "vulkan", "", -1, NULL, NULL, "no Vulkan device %d (there are %d)", index, n);
        return NULL;
    }
    d = vk_device_create(pds[index], index, err);
    if (!d) {
        vk_instance_put();
        pthread_mutex_unlock(&vk_reg.lock);
        return NULL;
    }
    d->refs = 1;
    vk_reg.devs[index] = d;
    pthread_mutex_unlock(&vk_reg.lock);
    return d;
}

void vk_device_release(vk_device *d) {
    if (!d) return;
    vk_reg_lock();
    if (--d->refs > 0) {
        pthread_mutex_unlock(&vk_reg.lock);
        return;
    }
    vk_reg.devs[d->index] = NULL;
    bool leaked = atomic_load(&d->unclean) != 0;
    vk_device_destroy(d);
    /* a leaked device keeps its instance too: the device was made from it */
    if (!leaked) vk_instance_put();
    pthread_mutex_unlock(&vk_reg.lock);
}
