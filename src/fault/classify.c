/*
 * classify.c - driver code to status, as data (FAULTS.md section 4).
 *
 * One table for every driver API. Backends call fault_classify and never
 * decide ad hoc, so the mapping is reviewed in one place and tested row by
 * row. A row with phase TSL_PHASE_ANY applies in every phase; a row for a
 * specific phase wins over it. Whatever matches no row is DEVICE_LOST: an
 * error we do not understand is no reason to trust the device.
 */
#include <string.h>

#include "fault/fault.h"

#define ANY TSL_PHASE_ANY
#define SUBMIT TSL_PHASE_SUBMIT
#define ALLOC TSL_PHASE_ALLOC
#define BUILD TSL_PHASE_BUILD

static const fault_class_row ROWS[] = {
    /* ---- Vulkan (VkResult) ---- */
    {"VkResult", 0, "VK_SUCCESS", ANY, TSL_SUCCESS},
    {"VkResult", -1, "VK_ERROR_OUT_OF_HOST_MEMORY", SUBMIT, TSL_RETRY},
    {"VkResult", -2, "VK_ERROR_OUT_OF_DEVICE_MEMORY", SUBMIT, TSL_RETRY},
    {"VkResult", -1, "VK_ERROR_OUT_OF_HOST_MEMORY", ALLOC, TSL_ALLOC_FAILED},
    {"VkResult", -2, "VK_ERROR_OUT_OF_DEVICE_MEMORY", ALLOC, TSL_ALLOC_FAILED},
    {"VkResult", -1000069000, "VK_ERROR_OUT_OF_POOL_MEMORY", ALLOC, TSL_ALLOC_FAILED},
    {"VkResult", -1000161000, "VK_ERROR_FRAGMENTATION", ALLOC, TSL_ALLOC_FAILED},
    {"VkResult", -12, "VK_ERROR_FRAGMENTED_POOL", ALLOC, TSL_ALLOC_FAILED},
    {"VkResult", -10, "VK_ERROR_TOO_MANY_OBJECTS", ALLOC, TSL_ALLOC_FAILED},
    {"VkResult", -5, "VK_ERROR_MEMORY_MAP_FAILED", ALLOC, TSL_ALLOC_FAILED},
    /* a kernel that cannot be built fails this graph; the op moves elsewhere */
    {"VkResult", -1, "VK_ERROR_OUT_OF_HOST_MEMORY", BUILD, TSL_FAILED},
    {"VkResult", -2, "VK_ERROR_OUT_OF_DEVICE_MEMORY", BUILD, TSL_FAILED},
    {"VkResult", -3, "VK_ERROR_INITIALIZATION_FAILED", BUILD, TSL_FAILED},
    {"VkResult", -13, "VK_ERROR_UNKNOWN", BUILD, TSL_FAILED},
    {"VkResult", -1000012000, "VK_ERROR_INVALID_SHADER_NV", BUILD, TSL_FAILED},
    {"VkResult", 1000297000, "VK_PIPELINE_COMPILE_REQUIRED", BUILD, TSL_FAILED},
    {"VkResult", -8, "VK_ERROR_FEATURE_NOT_PRESENT", BUILD, TSL_FAILED},
    {"VkResult", -4, "VK_ERROR_DEVICE_LOST", ANY, TSL_DEVICE_LOST},
    /* the validation layer cancelled a call our message callback refused */
    {"VkResult", -1000011001, "VK_ERROR_VALIDATION_FAILED_EXT", ANY, TSL_FAILED},
    /* a bounded wait that ran out: the watchdog's verdict on a hung GPU */
    {"VkResult", 2, "VK_TIMEOUT", SUBMIT, TSL_DEVICE_LOST},

    /* ---- Metal (table only; no Apple hardware here) ---- */
    {"MTLCommandBufferErrorDomain", 0, "MTLCommandBufferErrorNone", ANY, TSL_SUCCESS},
    {"MTLCommandBufferErrorDomain", 1, "MTLCommandBufferErrorInternal", ANY, TSL_DEVICE_LOST},
    {"MTLCommandBufferErrorDomain", 2, "MTLCommandBufferErrorTimeout", ANY, TSL_RETRY},
    {"MTLCommandBufferErrorDomain", 3, "MTLCommandBufferErrorPageFault", ANY, TSL_DEVICE_LOST},
    {"MTLCommandBufferErrorDomain", 4, "MTLCommandBufferErrorAccessRevoked", ANY, TSL_DEVICE_LOST},
    {"MTLCommandBufferErrorDomain", 7, "MTLCommandBufferErrorNotPermitted", ANY, TSL_RETRY},
    {"MTLCommandBufferErrorDomain", 8, "MTLCommandBufferErrorOutOfMemory", ANY, TSL_RETRY},
    {"MTLCommandBufferErrorDomain", 9, "MTLCommandBufferErrorInvalidResource", ANY, TSL_DEVICE_LOST},
    {"MTLCommandBufferErrorDomain", 10, "MTLCommandBufferErrorMemoryless", ANY, TSL_DEVICE_LOST},
    {"MTLCommandBufferErrorDomain", 11, "MTLCommandBufferErrorDeviceRemoved", ANY, TSL_DEVICE_LOST},
    {"MTLCommandBufferErrorDomain", 12, "MTLCommandBufferErrorStackOverflow", ANY, TSL_DEVICE_LOST},
    {"IOGPU", 6, "BackgroundExecutionNotPermitted", ANY, TSL_RETRY},
    {"MTLLibraryErrorDomain", 1, "MTLLibraryErrorUnsupported", BUILD, TSL_FAILED},
    {"MTLLibraryErrorDomain", 2, "MTLLibraryErrorInternal", BUILD, TSL_FAILED},
    {"MTLLibraryErrorDomain", 3, "MTLLibraryErrorCompileFailure", BUILD, TSL_FAILED},
    {"MTLLibraryErrorDomain", 5, "MTLLibraryErrorFunctionNotFound", BUILD, TSL_FAILED},
    {"MTLLibraryErrorDomain", 6, "MTLLibraryErrorFileNotFound", BUILD, TSL_FAILED},
    {"MTLDevice", 0, "newBufferWithLength returned nil", ALLOC, TSL_ALLOC_FAILED},

    /* ---- CUDA (table only until a CUDA backend exists) ---- */
    {"CUresult", 0, "CUDA_SUCCESS", ANY, TSL_SUCCESS},
    {"CUresult", 2, "CUDA_ERROR_OUT_OF_MEMORY", SUBMIT, TSL_RETRY},
    {"CUresult", 2, "CUDA_ERROR_OUT_OF_MEMORY", ALLOC, TSL_ALLOC_FAILED},
    {"CUresult", 46, "CUDA_ERROR_DEVICES_UNAVAILABLE", ANY, TSL_RETRY},
    {"CUresult", 500, "CUDA_ERROR_NOT_FOUND", ANY, TSL_FAILED},
    {"CUresult", 701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", ANY, TSL_FAILED},
    {"CUresult", 218, "CUDA_ERROR_INVALID_PTX", BUILD, TSL_FAILED},
    {"CUresult", 209, "CUDA_ERROR_NO_BINARY_FOR_GPU", BUILD, TSL_FAILED},
    {"CUresult", 700, "CUDA_ERROR_ILLEGAL_ADDRESS", ANY, TSL_DEVICE_LOST},
    {"CUresult", 702, "CUDA_ERROR_LAUNCH_TIMEOUT", ANY, TSL_DEVICE_LOST},
    {"CUresult", 710, "CUDA_ERROR_ASSERT", ANY, TSL_DEVICE_LOST},
    {"CUresult", 714, "CUDA_ERROR_HARDWARE_STACK_ERROR", ANY, TSL_DEVICE_LOST},
    {"CUresult", 715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", ANY, TSL_DEVICE_LOST},
    {"CUresult", 716, "CUDA_ERROR_MISALIGNED_ADDRESS", ANY, TSL_DEVICE_LOST},
    {"CUresult", 717, "CUDA_ERROR_INVALID_ADDRESS_SPACE", ANY, TSL_DEVICE_LOST},
    {"CUresult", 718, "CUDA_ERROR_INVALID_PC", ANY, TSL_DEVICE_LOST},
    {"CUresult", 719, "CUDA_ERROR_LAUNCH_FAILED", ANY, TSL_DEVICE_LOST},
    {"nvrtcResult", 0, "NVRTC_SUCCESS", ANY, TSL_SUCCESS},
    {"nvrtcResult", 6, "NVRTC_ERROR_COMPILATION", BUILD, TSL_FAILED},
};

const fault_class_row *fault_class_table(size_t *n) {
    if (n) *n = sizeof ROWS / sizeof ROWS[0];
    return ROWS;
}

tsl_status tsl_fault_classify(const char *domain, int64_t code, tsl_fault_phase phase, const char **name) {
    const fault_class_row *any = NULL;
    if (domain) {
        for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) {
            const fault_class_row *r = &ROWS[i];
            if (r->code != code || strcmp(r->domain, domain) != 0) continue;
            if (r->phase == phase && phase != TSL_PHASE_ANY) {
                if (name) *name = r->name;
                return r->status;
            }
            if (r->phase == TSL_PHASE_ANY && !any) any = r;
        }
    }
    if (any) {
        if (name) *name = any->name;
        return any->status;
    }
    if (name) *name = "unknown";
    return TSL_DEVICE_LOST;
}
