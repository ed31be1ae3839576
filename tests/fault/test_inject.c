/* The TSL_FAULT grammar and rule matching (FAULTS.md section 10). */
#include "fault/fault.h"
#include "test.h"

static fault_site site(uint64_t compute, int node, const tsl_tensor *t, const char *kernel, size_t bytes) {
    return (fault_site){.compute = compute, .node = node, .tensor = t, .kernel = kernel, .bytes = bytes};
}

static void test_parse_and_match(void) {
    fault_plan *p = fault_plan_new();
    tsl_error e;
    CHECK(fault_plan_empty(p));
    CHECK(fault_plan_add(p,
                         "retry@compute=3;lost@compute=5; nobuf@tensor=blk.0.attn_q.weight ;"
                         "kernel@name=mul_mat_f16_f32;alloc@bytes>1e9",
                         &e) == TSL_SUCCESS);
    CHECK(!fault_plan_empty(p));
    fault_site s = site(3, -1, NULL, NULL, 0);
    CHECK(fault_plan_fire(p, TSL_FAULT_RETRY, &s));
    s.compute = 4;
    CHECK(!fault_plan_fire(p, TSL_FAULT_RETRY, &s));
    CHECK(!fault_plan_fire(p, TSL_FAULT_LOST, &s));
    s.compute = 5;
    CHECK(fault_plan_fire(p, TSL_FAULT_LOST, &s));

    tsl_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "blk.0.attn_q.weight");
    s = site(1, 2, &t, NULL, 0);
    CHECK(fault_plan_fire(p, TSL_FAULT_NOBUF, &s));
    snprintf(t.name, sizeof t.name, "blk.0.attn_k.weight");
    CHECK(!fault_plan_fire(p, TSL_FAULT_NOBUF, &s));

    s = site(1, 0, NULL, "mul_mat_f16_f32", 0);
    CHECK(fault_plan_fire(p, TSL_FAULT_KERNEL, &s));
    s.kernel = "mul_mat_q4_0_f32";
    CHECK(!fault_plan_fire(p, TSL_FAULT_KERNEL, &s));

    s = site(1, -1, NULL, NULL, (size_t)2e9);
    CHECK(fault_plan_fire(p, TSL_FAULT_ALLOC, &s));
    s.bytes = 1000;
    CHECK(!fault_plan_fire(p, TSL_FAULT_ALLOC, &s));

    CHECK(fault_plan_fired(p, TSL_FAULT_RETRY) == 1);
    CHECK(fault_plan_fired(p, TSL_FAULT_ALLOC) == 1);
    fault_plan_clear(p);
    CHECK(fault_plan_empty(p));
    s = site(3, -1, NULL, NULL, 0);
    CHECK(!fault_plan_fire(p, TSL_FAULT_RETRY, &s));
    fault_plan_free(p);
}

static void test_every_nth_and_times(void) {
    fault_plan *p = fault_plan_new();
    tsl_error e;
    CHECK(fault_plan_add(p, "nobuf@compute%7", &e) == TSL_SUCCESS);
    int fired = 0;
    for (uint64_t c = 1; c <= 70; c++) {
        fault_site s = site(c, 0, NULL, NULL, 0);
        bool f = fault_plan_fire(p, TSL_FAULT_NOBUF, &s);
        CHECKF(f == (c % 7 == 0), "compute %llu", (unsigned long long)c);
        fired += f;
    }
    CHECK(fired == 10);
    fault_plan_clear(p);
    CHECK(fault_plan_add(p, "abort@node>2,times=2", &e) == TSL_SUCCESS);
    int n = 0;
    for (int node = 0; node < 10; node++) {
        fault_site s = site(1, node, NULL, NULL, 0);
        n += fault_plan_fire(p, TSL_FAULT_ABORT, &s);
    }
    CHECK(n == 2);
    /* prefix match and op names */
    fault_plan_clear(p);
    CHECK(fault_plan_add(p, "nobuf@tensor=blk.1.*;kernel@op=MUL_MAT", &e) == TSL_SUCCESS);
    tsl_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "blk.1.ffn_up");
    fault_site s = site(1, 0, &t, NULL, 0);
    CHECK(fault_plan_fire(p, TSL_FAULT_NOBUF, &s));
    snprintf(t.name, sizeof t.name, "blk.10.ffn_up");
    CHECK(!fault_plan_fire(p, TSL_FAULT_NOBUF, &s));
    t.op = TSL_OP_MUL_MAT;
    CHECK(fault_plan_fire(p, TSL_FAULT_KERNEL, &s));
    t.op = TSL_OP_ADD;
    CHECK(!fault_plan_fire(p, TSL_FAULT_KERNEL, &s));
    /* a class with no condition fires everywhere */
    fault_plan_clear(p);
    CHECK(fault_plan_add(p, "retry", &e) == TSL_SUCCESS);
    s = site(9, -1, NULL, NULL, 0);
    CHECK(fault_plan_fire(p, TSL_FAULT_RETRY, &s));
    fault_plan_free(p);
}

/* copylost: its own class, so "lost" rules keep firing only where they
 * did (a compute's fence) and copy completions only match "copylost"; the
 * "copy" key counts copy completions, and a copy in flight is matched by
 * the tensor name it kept. */
static void test_copylost(void) {
    fault_plan *p = fault_plan_new();
    tsl_error e;
    CHECK(strcmp(tsl_fault_class_name(TSL_FAULT_COPYLOST), "copylost") == 0);
    CHECK(fault_plan_add(p, "lost@compute=2;copylost@copy=3", &e) == TSL_SUCCESS);
    int fired = 0;
    for (uint64_t c = 1; c <= 5; c++) {
        fault_site s = {.compute = 2, .node = -1, .bytes = 64, .copy = c, .tensor_name = "x"};
        bool f = fault_plan_fire(p, TSL_FAULT_COPYLOST, &s);
        CHECKF(f == (c == 3), "copy %llu", (unsigned long long)c);
        fired += f;
    }
    CHECK(fired == 1);
    CHECK(fault_plan_fired(p, TSL_FAULT_LOST) == 0 && fault_plan_fired(p, TSL_FAULT_COPYLOST) == 1);
    /* the lost rule fires at its compute's fence as before */
    fault_site s = site(2, 4, NULL, NULL, 0);
    CHECK(fault_plan_fire(p, TSL_FAULT_LOST, &s));
    CHECK(!fault_plan_fire(p, TSL_FAULT_COPYLOST, &s));
    /* a compute's fence (copy 0) never matches a copy condition */
    fault_plan_clear(p);
    CHECK(fault_plan_add(p, "lost@copy>0;copylost@copy>0", &e) == TSL_SUCCESS);
    s = site(7, 3, NULL, NULL, 0);
    CHECK(!fault_plan_fire(p, TSL_FAULT_LOST, &s));
    CHECK(!fault_plan_fire(p, TSL_FAULT_COPYLOST, &s));
    /* tensor names: of a tensor, or kept by a copy in flight */
    fault_plan_clear(p);
    CHECK(fault_plan_add(p, "copylost@tensor=inp_*,bytes<1024", &e) == TSL_SUCCESS);
    s = (fault_site){.node = -1, .bytes = 32, .copy = 1, .tensor_name = "inp_tokens"};
    CHECK(fault_plan_fire(p, TSL_FAULT_COPYLOST, &s));
    s.bytes = 4096;
    CHECK(!fault_plan_fire(p, TSL_FAULT_COPYLOST, &s));
    s.bytes = 32;
    s.tensor_name = "kq_mask";
    CHECK(!fault_plan_fire(p, TSL_FAULT_COPYLOST, &s));
    s.tensor_name = NULL; /* recovery's own copies name no tensor */
    CHECK(!fault_plan_fire(p, TSL_FAULT_COPYLOST, &s));
    fault_plan_free(p);
}

static void test_bad_specs_add_nothing(void) {
    const char *bad[] = {
        "explode@compute=1",   /* unknown class */
        "retry@",              /* no condition */
        "retry@compute",       /* no operator */
        "retry@colour=3",      /* unknown key */
        "retry@compute=abc",   /* bad number */
        "retry@compute=-1",    /* negative */
        "retry@compute%0",     /* every 0th */
        "nobuf@tensor>x",      /* names compare with = */
        "retry@compute=1;lost@compute=", /* second rule broken: first must not be added either */
        "alloc@bytes>1e999",   /* overflow */
        "copylost@copy=x",     /* bad number */
        "copy_lost@copy=1",    /* unknown class */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fault_plan *p = fault_plan_new();
        tsl_error e;
        tsl_error_clear(&e);
        tsl_status st = fault_plan_add(p, bad[i], &e);
        CHECKF(st == TSL_FAILED, "'%s' accepted", bad[i]);
        CHECKF(fault_plan_empty(p), "'%s' added rules", bad[i]);
        CHECK_STR_CONTAINS(e.message, "TSL_FAULT");
        fault_plan_free(p);
    }
    /* empty rules between separators are fine */
    fault_plan *p = fault_plan_new();
    tsl_error e;
    CHECK(fault_plan_add(p, " ; retry@compute=1 ;; ", &e) == TSL_SUCCESS);
    CHECK(!fault_plan_empty(p));
    fault_plan_free(p);
}

int main(void) {
    RUN(test_parse_and_match);
    RUN(test_every_nth_and_times);
    RUN(test_copylost);
    RUN(test_bad_specs_add_nothing);
    return test_summary();
}
