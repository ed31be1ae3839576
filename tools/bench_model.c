/*
 * bench_model.c - `tensile bench model`: how fast a model runs, next to
 * what this machine's memory can do.
 *
 * Prefill (a 512-token prompt in one graph) is compute-bound; decode (128
 * single tokens) reads every weight once per token and is bandwidth-bound.
 * So decode is reported as the bytes of weights it reads per second (the
 * model's tensor bytes, without token_embd unless it is also the output
 * projection, times tokens per second) and as a ratio to a copy bandwidth
 * measured in the same run, in the same process, on the same cores: a
 * STREAM-style copy (each thread memcpy's its slice of buffers several
 * times the L3; read + written bytes counted), the same ceiling `tensile
 * bench ops` measures. A ratio travels between machines where GB/s do not.
 * On a shared (virtualised) machine the bandwidth left by the neighbours
 * changes from second to second, so decode runs in 8 rounds, each right
 * after its own copy measurement, and the ratio reported is the median of
 * the rounds' ratios (min and max are given too).
 *
 * Tokens are fixed pseudo-random ids (the model's speed does not depend on
 * them); decode feeds back the argmax, as greedy generation does. A short
 * warm-up decode runs first so the graph allocator's buffer and the
 * backend's scratch exist before timing.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "llm_cli.h"

typedef struct bm_copy {
    _Atomic int *go;
    char *dst;
    const char *src;
    size_t n;
    double t_end;
} bm_copy;

static void *bm_copy_worker(void *arg) {
    bm_copy *t = arg;
    while (atomic_load_explicit(t->go, memory_order_acquire) == 0) sched_yield();
    memcpy(t->dst, t->src, t->n);
    t->t_end = cli_now();
    return NULL;
}


static int bm_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The copy ceiling's buffers and threads, made once and measured several
 * times during the run. */
typedef struct bm_ceiling {
    int nth;
    size_t bytes;
    char *a, *b;
    bm_copy *th;
    pthread_t *tid;
} bm_ceiling;

static bool bm_ceiling_init(bm_ceiling *c, int nth) {
    memset(c, 0, sizeof *c);
    c->nth = nth;
    size_t bytes = 4 * cli_l3_bytes();
    if (bytes < ((size_t)256 << 20)) bytes = (size_t)256 << 20;
    c->bytes = bytes / (size_t)(64 * nth) * (size_t)(64 * nth);
    c->a = aligned_alloc(64, c->bytes);
    c->b = aligned_alloc(64, c->bytes);
    c->th = calloc((size_t)nth, sizeof *c->th);
    c->tid = calloc((size_t)nth, sizeof *c->tid);
    if (!c->a || !c->b || !c->th || !c->tid) return false;
    memset(c->a, 1, c->bytes);
    memset(c->b, 2, c->bytes);
    return true;
}

static void bm_ceiling_free(bm_ceiling *c) {
    free(c->a);
    free(c->b);
    free(c->th);
    free(c->tid);
}

/* Copy bandwidth in GB/s (read + written bytes): the median of reps runs
 * after one warm-up; 0 if threads could not be started. */
static double bm_copy_gbs(bm_ceiling *c, int reps) {
    double t[16];
    int nt = 0;
    const size_t chunk = c->bytes / (size_t)c->nth;
    if (reps > 15) reps = 15;
    for (int rep = 0; rep <= reps; rep++) {
        _Atomic int go = 0;
        int started = 0;
        for (int i = 0; i < c->nth; i++) {
            c->th[i] = (bm_copy){.go = &go, .dst = c->b + (size_t)i * chunk, .src = c->a + (size_t)i * chunk, .n = chunk};
            if (pthread_create(&c->tid[i], NULL, bm_copy_worker, &c->th[i]) != 0) break;
            started++;
        }
        double t0 = cli_now(), t1 = t0;
        atomic_store_explicit(&go, 1, memory_order_release);
        for (int i = 0; i < started; i++) {
            pthread_join(c->tid[i], NULL);
            if (c->th[i].t_end > t1) t1 = c->th[i].t_end;
        }
        if (started != c->nth) return 0;
        if (rep > 0) t[nt++] = t1 - t0;
    }
    qsort(t, (size_t)nt, sizeof t[0], bm_cmp);
    return 2.0 * (double)c->bytes / t[nt / 2] * 1e-9;
}

static double bm_median(double *x, int n) {
    qsort(x, (size_t)n, sizeof x[0], bm_cmp);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static void bm_usage(FILE *f) {
    fprintf(f, "usage: tensile bench model -m FILE [--threads T] [--backend cpu] [--prompt N] [--gen N] [--json]\n"
               "  Prefill N (default 512) tokens in one graph, then decode --gen (default 128) tokens one at a\n"
               "  time; tokens/s for both, and decode's weight bytes read per second as a ratio to a copy\n"
               "  bandwidth measured in the same run.\n");
}

static int32_t bm_argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

int bench_model(int argc, char **argv) {
    const char *model = NULL, *backend = "auto";
    long long threads = 0, n_prompt = 512, n_gen = 128;
    bool json = false, quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bm_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--quiet")) {
            quiet = true;
        } else if (!v) {
            fprintf(stderr, "tensile bench model: unknown option or missing value '%s'\n", a);
            bm_usage(stderr);
            return 2;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            model = argv[++i];
        } else if (!strcmp(a, "--backend")) {
            backend = argv[++i];
        } else if (!strcmp(a, "--threads") || !strcmp(a, "--prompt") || !strcmp(a, "--gen")) {
            long long x;
            if (!cli_int(v, 1, 1 << 20, &x)) {
                fprintf(stderr, "tensile bench model: %s wants a positive number, got '%s'\n", a, v);
                return 2;
            }
            *(!strcmp(a, "--threads") ? &threads : !strcmp(a, "--prompt") ? &n_prompt : &n_gen) = x;
            i++;
        } else {
            fprintf(stderr, "tensile bench model: unknown option '%s'\n", a);
            bm_usage(stderr);
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "tensile bench model: -m FILE is required\n");
        bm_usage(stderr);
        return 2;
    }
    int code = 0, rc = 1;
    tsl_backend *be = cli_backend("bench model", backend, (int)threads, &code);
    if (!be) return code;
    const int nth = tsl_backend_cpu_threads(be) > 0 ? tsl_backend_cpu_threads(be) : 1;
    tsl_error err;
    tsl_model_params mp = tsl_model_default_params();
    mp.progress = !json && !quiet;
    tsl_model *m = tsl_model_load(model, &mp, &err);
    tsl_llm_ctx *c = NULL;
    int32_t *toks = NULL;
    if (!m) {
        cli_error("bench model", &err);
        goto done;
    }
    const tsl_model_info *in = tsl_model_get_info(m);
    tsl_llm_params lp = tsl_llm_default_params();
    lp.backend = be;
    lp.n_ctx = (int32_t)(n_prompt + n_gen + 16);
    lp.n_batch = (int32_t)n_prompt;
    c = tsl_llm_ctx_new(m, &lp, &err);
    toks = malloc((size_t)n_prompt * sizeof *toks);
    if (!c || !toks) {
        if (!c) cli_error("bench model", &err);
        goto done;
    }
    uint64_t x = 0x243F6A8885A308D3ULL;
    for (long long i = 0; i < n_prompt; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        toks[i] = (int32_t)(x % (uint64_t)in->n_vocab);
    }

    bm_ceiling ceil;
    if (!bm_ceiling_init(&ceil, nth)) {
        bm_ceiling_free(&ceil);
        fprintf(stderr, "tensile bench model: cannot allocate the copy buffers\n");
        goto done;
    }

    /* warm-up: the allocator's buffer at full prefill size, then a decode */
    if (tsl_llm_decode(c, toks, (int32_t)n_prompt, &err) != TSL_SUCCESS ||
        tsl_llm_decode(c, toks, 1, &err) != TSL_SUCCESS) {
        bm_ceiling_free(&ceil);
        cli_error("bench model", &err);
        goto done;
    }
    tsl_llm_clear(c);

    double t0 = cli_now();
    if (tsl_llm_decode(c, toks, (int32_t)n_prompt, &err) != TSL_SUCCESS) {
        bm_ceiling_free(&ceil);
        cli_error("bench model", &err);
        goto done;
    }
    const double t_prefill = cli_now() - t0;
    /* decode in rounds, each after its own copy measurement */
    enum { BM_ROUNDS = 8 };
    const int rounds = n_gen < BM_ROUNDS ? (int)n_gen : BM_ROUNDS;
    double copy[BM_ROUNDS], ratio[BM_ROUNDS], t_decode = 0;
    int32_t id = bm_argmax(tsl_llm_logits(c, -1), in->n_vocab);
    long long done_tokens = 0;
    for (int r = 0; r < rounds; r++) {
        const long long k = n_gen * (r + 1) / rounds - done_tokens;
        copy[r] = bm_copy_gbs(&ceil, 3);
        double ts = cli_now();
        for (long long i = 0; i < k; i++) {
            if (tsl_llm_decode(c, &id, 1, &err) != TSL_SUCCESS) {
                bm_ceiling_free(&ceil);
                cli_error("bench model", &err);
                goto done;
            }
            id = bm_argmax(tsl_llm_logits(c, -1), in->n_vocab);
        }
        const double dt = cli_now() - ts;
        t_decode += dt;
        done_tokens += k;
        ratio[r] = copy[r] > 0 ? (double)in->decode_bytes * (double)k / dt * 1e-9 / copy[r] : 0;
    }
    bm_ceiling_free(&ceil);
    const double pp = (double)n_prompt / t_prefill, tg = (double)n_gen / t_decode;
    const double gbs = (double)in->decode_bytes * tg * 1e-9;
    double rsorted[BM_ROUNDS];
    memcpy(rsorted, ratio, sizeof ratio);
    const double ratio_med = bm_median(rsorted, rounds), ratio_min = rsorted[0], ratio_max = rsorted[rounds - 1];
    const double copy_gbs = bm_median(copy, rounds);
    if (json) {
        printf("{\"model\":");
        cli_json_str(stdout, in->name, strlen(in->name));
        printf(",\"arch\":\"%s\",\"type\":\"%s\",\"n_params\":%llu,\"decode_bytes\":%llu,\"backend\":",
               in->arch_name, tsl_type_name(in->weight_type), (unsigned long long)in->n_params,
               (unsigned long long)in->decode_bytes);
        cli_json_str(stdout, tsl_backend_device(be), strlen(tsl_backend_device(be)));
        printf(",\"threads\":%d,\"prompt_n\":%lld,\"prompt_tok_s\":%.3f,\"gen_n\":%lld,\"gen_tok_s\":%.3f,"
               "\"gen_ms_per_tok\":%.3f,\"weights_gbs\":%.3f,\"copy_gbs\":%.3f,\"bw_ratio\":%.4f,"
               "\"bw_ratio_min\":%.4f,\"bw_ratio_max\":%.4f}\n",
               nth, n_prompt, pp, n_gen, tg, 1e3 / tg, gbs, copy_gbs, ratio_med, ratio_min, ratio_max);
    } else {
        printf("model: %s (%s, %s, %.2f B params, %.1f MB read per token)\n", in->name, in->arch_name,
               tsl_type_name(in->weight_type), (double)in->n_params * 1e-9, (double)in->decode_bytes * 1e-6);
        printf("backend: %s\n", tsl_backend_device(be));
        printf("prefill: %lld tokens, %.2f tok/s\n", n_prompt, pp);
        printf("decode: %lld tokens, %.2f tok/s (%.2f ms/token)\n", n_gen, tg, 1e3 / tg);
        printf("decode weights read: %.2f GB/s; copy bandwidth: %.2f GB/s (median of %d); ratio %.1f%% "
               "(median of %d rounds, %.1f%%..%.1f%%)\n",
               gbs, copy_gbs, rounds, 100.0 * ratio_med, rounds, 100.0 * ratio_min, 100.0 * ratio_max);
    }
    rc = 0;
done:
    free(toks);
    tsl_llm_ctx_free(c);
    tsl_model_free(m);
    tsl_backend_free(be);
    return rc;
}
