/* The classification tables (FAULTS.md section 4): one expectation per row,
 * written from the contract independently of src/fault/classify.c, checked in
 * both directions (every expectation holds; every table row is expected). */
#include "fault/fault.h"
#include "test.h"

typedef struct {
    const char *domain;
    int64_t code;
    tsl_fault_phase phase;
    tsl_status want;
} expect;

#define S TSL_PHASE_SUBMIT
#define A TSL_PHASE_ALLOC
#define B TSL_PHASE_BUILD
static const expect EXPECT[] = {
    /* Vulkan: OOM at submit is transient; at allocation ALLOC_FAILED; build errors fail the graph */
    {"VkResult", 0, S, TSL_SUCCESS},
    {"VkResult", -1, S, TSL_RETRY},
    {"VkResult", -2, S, TSL_RETRY},
    {"VkResult", -1, A, TSL_ALLOC_FAILED},
    {"VkResult", -2, A, TSL_ALLOC_FAILED},
    {"VkResult", -1000069000, A, TSL_ALLOC_FAILED},
    {"VkResult", -1000161000, A, TSL_ALLOC_FAILED},
    {"VkResult", -12, A, TSL_ALLOC_FAILED},
    {"VkResult", -10, A, TSL_ALLOC_FAILED},
    {"VkResult", -5, A, TSL_ALLOC_FAILED},
    {"VkResult", -1, B, TSL_FAILED},
    {"VkResult", -2, B, TSL_FAILED},
    {"VkResult", -3, B, TSL_FAILED},
    {"VkResult", -13, B, TSL_FAILED},
    {"VkResult", -1000012000, B, TSL_FAILED},
    {"VkResult", 1000297000, B, TSL_FAILED},
    {"VkResult", -8, B, TSL_FAILED},
    {"VkResult", -4, S, TSL_DEVICE_LOST},
    {"VkResult", -4, A, TSL_DEVICE_LOST},
    {"VkResult", -4, B, TSL_DEVICE_LOST},
    {"VkResult", 2, S, TSL_DEVICE_LOST}, /* watchdog: bounded wait ran out */
    {"VkResult", -1000011001, B, TSL_FAILED}, /* validation layer cancelled the call */
    {"VkResult", -1000011001, S, TSL_FAILED},
    /* Metal */
    {"MTLCommandBufferErrorDomain", 0, S, TSL_SUCCESS},
    {"MTLCommandBufferErrorDomain", 1, S, TSL_DEVICE_LOST},
    {"MTLCommandBufferErrorDomain", 2, S, TSL_RETRY},
    {"MTLCommandBufferErrorDomain", 3, S, TSL_DEVICE_LOST},
    {"MTLCommandBufferErrorDomain", 4, S, TSL_DEVICE_LOST},
    {"MTLCommandBufferErrorDomain", 7, S, TSL_RETRY},
    {"MTLCommandBufferErrorDomain", 8, S, TSL_RETRY},
    {"MTLCommandBufferErrorDomain", 9, S, TSL_DEVICE_LOST},
    {"MTLCommandBufferErrorDomain", 10, S, TSL_DEVICE_LOST},
    {"MTLCommandBufferErrorDomain", 11, S, TSL_DEVICE_LOST},
    {"MTLCommandBufferErrorDomain", 12, S, TSL_DEVICE_LOST},
    {"IOGPU", 6, S, TSL_RETRY},
    {"MTLLibraryErrorDomain", 1, B, TSL_FAILED},
    {"MTLLibraryErrorDomain", 2, B, TSL_FAILED},
    {"MTLLibraryErrorDomain", 3, B, TSL_FAILED},
    {"MTLLibraryErrorDomain", 5, B, TSL_FAILED},
    {"MTLLibraryErrorDomain", 6, B, TSL_FAILED},
    {"MTLDevice", 0, A, TSL_ALLOC_FAILED},
    /* CUDA */
    {"CUresult", 0, S, TSL_SUCCESS},
    {"CUresult", 2, S, TSL_RETRY},
    {"CUresult", 2, A, TSL_ALLOC_FAILED},
    {"CUresult", 46, S, TSL_RETRY},
    {"CUresult", 500, B, TSL_FAILED},
    {"CUresult", 701, S, TSL_FAILED},
    {"CUresult", 218, B, TSL_FAILED},
    {"CUresult", 209, B, TSL_FAILED},
    {"CUresult", 700, S, TSL_DEVICE_LOST},
    {"CUresult", 702, S, TSL_DEVICE_LOST},
    {"CUresult", 710, S, TSL_DEVICE_LOST},
    {"CUresult", 714, S, TSL_DEVICE_LOST},
    {"CUresult", 715, S, TSL_DEVICE_LOST},
    {"CUresult", 716, S, TSL_DEVICE_LOST},
    {"CUresult", 717, S, TSL_DEVICE_LOST},
    {"CUresult", 718, S, TSL_DEVICE_LOST},
    {"CUresult", 719, S, TSL_DEVICE_LOST},
    {"nvrtcResult", 0, B, TSL_SUCCESS},
    {"nvrtcResult", 6, B, TSL_FAILED},
};
#define N_EXPECT (sizeof EXPECT / sizeof EXPECT[0])

static void test_every_expectation_holds(void) {
    for (size_t i = 0; i < N_EXPECT; i++) {
        const char *name = NULL;
        tsl_status got = tsl_fault_classify(EXPECT[i].domain, EXPECT[i].code, EXPECT[i].phase, &name);
        CHECKF(got == EXPECT[i].want, "%s %lld phase %d: got %s want %s", EXPECT[i].domain,
               (long long)EXPECT[i].code, (int)EXPECT[i].phase, tsl_status_str(got), tsl_status_str(EXPECT[i].want));
        CHECKF(name && strcmp(name, "unknown") != 0, "%s %lld has a name", EXPECT[i].domain, (long long)EXPECT[i].code);
    }
}

static void test_every_row_is_expected(void) {
    size_t n;
    const fault_class_row *rows = fault_class_table(&n);
    CHECK(n > 40);
    for (size_t i = 0; i < n; i++) {
        bool found = false;
        for (size_t j = 0; j < N_EXPECT && !found; j++)
            found = !strcmp(rows[i].domain, EXPECT[j].domain) && rows[i].code == EXPECT[j].code &&
                    (rows[i].phase == TSL_PHASE_ANY || rows[i].phase == EXPECT[j].phase) &&
                    rows[i].status == EXPECT[j].want;
        CHECKF(found, "row %zu (%s %lld %s) has no expectation", i, rows[i].domain, (long long)rows[i].code,
               rows[i].name);
    }
}

static void test_unknown_is_device_lost(void) {
    const char *name = NULL;
    CHECK(tsl_fault_classify("VkResult", -999, TSL_PHASE_SUBMIT, &name) == TSL_DEVICE_LOST);
    CHECK(name && !strcmp(name, "unknown"));
    CHECK(tsl_fault_classify("NoSuchDriver", 0, TSL_PHASE_SUBMIT, NULL) == TSL_DEVICE_LOST);
    CHECK(tsl_fault_classify(NULL, 0, TSL_PHASE_SUBMIT, NULL) == TSL_DEVICE_LOST);
    /* an OOM from the pool allocator is only understood at allocation */
    CHECK(tsl_fault_classify("VkResult", -1000069000, TSL_PHASE_SUBMIT, NULL) == TSL_DEVICE_LOST);
}

static void test_status_values(void) {
    /* the values are part of the contract (FAULTS.md section 1) */
    CHECK(TSL_SUCCESS == 0 && TSL_ABORTED == 1 && TSL_RETRY == 2);
    CHECK(TSL_FAILED == -1 && TSL_ALLOC_FAILED == -2 && TSL_DEVICE_LOST == -3);
    CHECK(!strcmp(tsl_status_str(TSL_DEVICE_LOST), "DEVICE_LOST"));
    CHECK(!strcmp(tsl_status_str(TSL_RETRY), "RETRY"));
    CHECK(!strcmp(tsl_status_str((tsl_status)42), "UNKNOWN"));
}

static void test_error_format(void) {
    tsl_error e;
    tsl_error_clear(&e);
    CHECK(e.node == -1 && e.split == -1 && e.status == TSL_SUCCESS);
    e.status = TSL_FAILED;
    snprintf(e.backend, sizeof e.backend, "vulkan0");
    snprintf(e.device, sizeof e.device, "NVIDIA H200");
    e.node = 17;
    snprintf(e.op, sizeof e.op, "MUL_MAT");
    snprintf(e.tensor, sizeof e.tensor, "blk.3.ffn_up");
    snprintf(e.kernel, sizeof e.kernel, "mul_mat_q4_0_f32");
    snprintf(e.message, sizeof e.message, "could not be built");
    snprintf(e.driver_domain, sizeof e.driver_domain, "VkResult");
    e.driver_code = -13;
    snprintf(e.driver_text, sizeof e.driver_text, "entry point not found");
    snprintf(e.hint, sizeof e.hint, "this op will run on another backend");
    char line[512];
    size_t n = tsl_error_format(&e, line, sizeof line);
    CHECK(n == strlen(line));
    CHECK_STR_CONTAINS(line, "vulkan0 (NVIDIA H200): FAILED at node 17 MUL_MAT 'blk.3.ffn_up'");
    CHECK_STR_CONTAINS(line, "kernel mul_mat_q4_0_f32");
    CHECK_STR_CONTAINS(line, "(VkResult -13: entry point not found)");
    CHECK_STR_CONTAINS(line, "- this op will run on another backend");
    /* truncation keeps the snprintf contract */
    char small[16];
    size_t m = tsl_error_format(&e, small, sizeof small);
    CHECK(m == n && strlen(small) == sizeof small - 1);
    CHECK(tsl_error_format(&e, NULL, 0) == n);
}

int main(void) {
    RUN(test_every_expectation_holds);
    RUN(test_every_row_is_expected);
    RUN(test_unknown_is_device_lost);
    RUN(test_status_values);
    RUN(test_error_format);
    return test_summary();
}
