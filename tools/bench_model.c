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
 * them); decode feeds back the greedy choice, as greedy generation does:
 * by default the graph's argmax, one decode step a graph or --steps K (each
 * step embedding the last one's choice on the device, as `tensile run
 * --temp 0 --steps K` generates), or with --greedy host the logits read back and the
 * library's tsl_sampler at temperature 0 picking, one token a graph. A short
 * warm-up decode runs first so the graph allocator's buffer and the
 * backend's scratch exist before timing, and after the timed prefill the
 * decode graph is built and recorded by three untimed decodes (the cache
 * cut back to the prompt after each): decode is timed in its steady state,
 * replaying the recorded graph, not with a first graph's resolve and
 * encoding.
 *
 * On a Vulkan device (--backend vulkan) the ceiling is the device's own: an
 * F32 -> F32 cpy graph over buffers many times the GPU's L2 (1 GiB read and
 * 1 GiB written where the device has the memory; pieces of at most what one
 * kernel binding can see), read + written bytes counted, the best of a few
 * runs, timed on the GPU (timestamps) where the device has them, else wall
 * time. Decode is then also taken apart per token: host work (building the
 * graph, filling the inputs, encoding and submitting the command buffers)
 * against GPU time, with the dispatches, barriers and submits each token
 * costs, from tsl_vulkan_stats, and the scheduler's splits (1 when the
 * device runs the whole graph). Without timestamps the GPU time is the
 * compute's wall time less its encoding and submitting, and says so.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "llm_cli.h"
#include "model/llm_impl.h"

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

/* ---- the device's copy ceiling ---------------------------------------------- */

#define BM_VK_PIECES 16

typedef struct bm_vkcopy {
    tsl_context *ctx;
    tsl_buffer *buf[2 * BM_VK_PIECES];
    int n_buf;
    tsl_graph *g;
    size_t bytes; /* read (= written) per run */
    size_t piece;
} bm_vkcopy;

static void bm_vk_copy_free(bm_vkcopy *v) {
    for (int i = 0; i < v->n_buf; i++) tsl_buffer_free(v->buf[i]);
    tsl_ctx_free(v->ctx);
    memset(v, 0, sizeof *v);
}

/* Independent cpy nodes over `count` pieces: the device runs them together,
 * as a copy kernel over one large range would run its workgroups. */
static bool bm_vk_copy_init(bm_vkcopy *v, tsl_backend *be, size_t want, tsl_error *err) {
    memset(v, 0, sizeof *v);
    tsl_vulkan_device_info info;
    if (tsl_backend_vulkan_info(be, &info, err) != TSL_SUCCESS) return false;
    size_t total = want ? want : (size_t)1 << 30;
    if (info.device_local_bytes && info.device_local_bytes / 8 < total) total = (size_t)(info.device_local_bytes / 8);
    size_t piece = (size_t)256 << 20;
    while (piece > ((size_t)1 << 20) && (uint64_t)piece + 65536 > info.max_storage_buffer_range) piece /= 2;
    if (info.max_allocation_bytes)
        while (piece > ((size_t)1 << 20) && piece > info.max_allocation_bytes) piece /= 2;
    if (piece > total) piece = total;
    int count = (int)(total / piece);
    if (count > BM_VK_PIECES) count = BM_VK_PIECES;
    if (count < 1) count = 1;
    v->piece = piece;
    v->bytes = piece * (size_t)count;
    v->ctx = tsl_ctx_new((tsl_ctx_params){.mem_size = (size_t)(4 * count + 8) * 1024 + (1u << 20), .no_alloc = true});
    if (!v->ctx) return false;
    tsl_tensor *outs[BM_VK_PIECES];
    for (int i = 0; i < count; i++) {
        tsl_tensor *src = tsl_new_tensor_2d(v->ctx, TSL_TYPE_F32, 4096, (int64_t)(piece / 16384));
        tsl_tensor *dst = tsl_new_tensor_2d(v->ctx, TSL_TYPE_F32, 4096, (int64_t)(piece / 16384));
        for (int j = 0; j < 2; j++) {
            tsl_tensor *t = j ? dst : src;
            tsl_buffer *b = t ? tsl_buffer_alloc(be, piece, err) : NULL;
            if (!b) return false;
            v->buf[v->n_buf++] = b;
            if (tsl_buffer_place(b, t, 0, err) != TSL_SUCCESS) return false;
        }
        outs[i] = tsl_cpy(v->ctx, src, dst);
    }
    v->g = tsl_ctx_error(v->ctx) ? NULL : tsl_graph_build(v->ctx, outs, count);
    if (!v->g && err) snprintf(err->message, sizeof err->message, "copy graph: %s", tsl_ctx_error(v->ctx));
    return v->g != NULL;
}

/* Read + written GB/s of the copy graph: the best of reps runs after a
 * warm-up, GPU time when the device has timestamps (*gpu set), else wall. */
static double bm_vk_copy_gbs(bm_vkcopy *v, tsl_backend *be, int reps, bool *gpu, tsl_error *err) {
    double best = 0;
    *gpu = true;
    for (int i = 0; i <= reps; i++) {
        double t0 = cli_now();
        if (tsl_backend_graph_compute(be, v->g, err) != TSL_SUCCESS) return -1;
        double dt = cli_now() - t0;
        tsl_vulkan_stats vs;
        if (tsl_backend_vulkan_stats(be, &vs) == TSL_SUCCESS && vs.gpu_timing && vs.last_gpu_us > 0)
            dt = vs.last_gpu_us * 1e-6;
        else
            *gpu = false;
        double gbs = 2.0 * (double)v->bytes / dt * 1e-9;
        if (i > 0 && gbs > best) best = gbs;
    }
    return best;
}

/* ---- per-token accounting on a device ------------------------------------------ */

typedef struct bm_split {
    int tokens;
    double wall_ms, build_ms, input_ms, compute_ms, output_ms, encode_ms, gpu_ms, resolve_ms, wait_ms, sched_ms, sample_ms;
    double dispatches, barriers, submits, reused, splits, copies;
    bool gpu_timed;
} bm_split;

/* One compute's costs, of `tokens` decoded tokens (several steps a graph). */
static void bm_split_add(bm_split *a, const tsl_llm_ctx *c, const tsl_vulkan_stats *s0, const tsl_vulkan_stats *s1,
                         double wall_ms, int tokens) {
    const llm_timings *tm = llm_ctx_timings(c);
    a->tokens += tokens;
    a->wall_ms += wall_ms;
    a->build_ms += tm->build_ms + tm->plan_ms;
    a->input_ms += tm->input_ms;
    a->compute_ms += tm->compute_ms;
    a->sched_ms += tm->sched_ms;
    a->output_ms += tm->output_ms;
    /* the compute's wall time of encoding and submitting: per node, times
     * the nodes it encoded (the graph's kernels, when it ran in one split) */
    const double enc = s1->last_encode_us_per_node * tm->n_compute * 1e-3;
    a->encode_ms += enc;
    a->resolve_ms += s1->last_resolve_us * 1e-3;
    if (s1->gpu_timing && s1->gpu_ms > s0->gpu_ms) {
        const double gpu = s1->gpu_ms - s0->gpu_ms, wait = tm->compute_ms - tm->sched_ms - s1->last_resolve_us * 1e-3 - enc - gpu;
        a->gpu_ms += gpu;
        /* the compute's wall time outside the scheduler's planning, the
         * backend's resolve and encoding and the GPU's timestamps:
         * submission, the GPU starting, the host waking */
        a->wait_ms += wait > 0 ? wait : 0;
    } else {
        a->gpu_timed = false;
        const double rest = tm->compute_ms - tm->sched_ms - enc - s1->last_resolve_us * 1e-3;
        a->gpu_ms += rest > 0 ? rest : 0;
    }
    a->dispatches += (double)(s1->dispatches - s0->dispatches);
    a->barriers += (double)(s1->barriers - s0->barriers);
    a->submits += (double)(s1->submits - s0->submits);
    a->reused += (double)(s1->reused_command_buffers - s0->reused_command_buffers);
    a->splits += tm->n_splits;
    a->copies += tm->n_copies;
}

static void bm_usage(FILE *f) {
    fprintf(f, "usage: tensile bench model -m FILE [--backend cpu|vulkan|auto] [--device N] [--threads T]\n"
               "                           [--prompt N] [--gen N] [--copy-mib N] [--greedy graph|host] [--steps K]\n"
               "                           [--json]\n"
               "  Prefill N (default 512) tokens in one graph, then decode --gen (default 128) tokens one at a\n"
               "  time; tokens/s for both, and decode's weight bytes read per second as a ratio to a copy\n"
               "  bandwidth measured in the same run (on a Vulkan device: the device's own copy, and each\n"
               "  decoded token split into host and GPU time, dispatches and barriers).\n"
               "  --copy-mib N   bytes the device's copy ceiling reads (and writes); default 1024, or an\n"
               "                 eighth of the device's memory if less\n"
               "  --greedy graph the next token is the argmax the graph computes (tsl_llm_decode_greedy;\n"
               "                 only its id is read back); the default\n"
               "  --steps K      with --greedy graph: K decode steps in one graph, each embedding the last\n"
               "                 one's choice (tsl_llm_generate_greedy, as `tensile run --temp 0`); 1..32,\n"
               "                 default 1\n"
               "  --greedy host  the logits are read back and the sampler (temp 0) picks, as a custom\n"
               "                 sampling chain would\n");
}

int bench_model(int argc, char **argv) {
    const char *model = NULL, *backend = "auto";
    long long threads = 0, n_prompt = 512, n_gen = 128, device = -1, copy_mib = 0, steps = 0;
    bool json = false, quiet = false, host_greedy = false;
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
        } else if (!strcmp(a, "--greedy")) {
            if (strcmp(v, "graph") && strcmp(v, "host")) {
                fprintf(stderr, "tensile bench model: --greedy wants 'graph' or 'host', got '%s'\n", v);
                return 2;
            }
            host_greedy = !strcmp(v, "host");
            i++;
        } else if (!strcmp(a, "--steps")) {
            if (!cli_int(v, 1, TSL_LLM_MAX_STEPS, &steps)) {
                fprintf(stderr, "tensile bench model: --steps wants 1..32, got '%s'\n", v);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--backend")) {
            backend = argv[++i];
        } else if (!strcmp(a, "--device")) {
            if (!cli_int(v, 0, 1 << 20, &device)) {
                fprintf(stderr, "tensile bench model: --device wants a device index >= 0, got '%s'\n", v);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--copy-mib")) {
            if (!cli_int(v, 1, 1 << 20, &copy_mib)) {
                fprintf(stderr, "tensile bench model: --copy-mib wants a positive number, got '%s'\n", v);
                return 2;
            }
            i++;
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
    if (host_greedy && steps > 1) {
        fprintf(stderr, "tensile bench model: --steps %lld needs --greedy graph (the host picks one token a graph)\n",
                steps);
        return 2;
    }
    int code = 0, rc = 1;
    tsl_backend *be = cli_backend_dev("bench model", backend, (int)device, (int)threads, &code);
    if (!be) return code;
    const bool vk = tsl_backend_is_vulkan(be);
    const int nth = cli_threads(be, (int)threads);
    tsl_error err;
    tsl_model_params mp = tsl_model_default_params();
    mp.progress = !json && !quiet;
    mp.prefetch = !vk; /* a device reads the file once, uploading it */
    tsl_model *m = tsl_model_load(model, &mp, &err);
    tsl_llm_ctx *c = NULL;
    int32_t *toks = NULL;
    bm_ceiling ceil;
    memset(&ceil, 0, sizeof ceil);
    bm_vkcopy vcopy;
    memset(&vcopy, 0, sizeof vcopy);
    tsl_backend *cbe = NULL; /* the copy's own context on the device */
    tsl_sampler *smp = NULL; /* greedy: the library's sampler, as `tensile run --temp 0` picks */
    if (!m) {
        cli_error("bench model", &err);
        goto done;
    }
    const tsl_model_info *in = tsl_model_get_info(m);
    tsl_llm_params lp = tsl_llm_default_params();
    lp.backend = be;
    lp.n_threads = (int32_t)threads;
    lp.n_ctx = (int32_t)(n_prompt + n_gen + 16);
    lp.n_batch = (int32_t)n_prompt;
    lp.n_steps = (int32_t)steps;
    double tu = cli_now();
    c = tsl_llm_ctx_new(m, &lp, &err);
    const double t_setup = cli_now() - tu; /* the KV cache, and on a device the weights' upload */
    steps = tsl_llm_n_steps(c);
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

    /* On a device the copy runs in a context of its own (a second backend on
     * the same device), so that it leaves the decode context's recorded
     * commands alone: decoding between two copies is as it is without them. */
    if (vk) {
        tsl_vulkan_device_info di;
        tsl_error cerr;
        cbe = tsl_backend_vulkan_info(be, &di, &cerr) == TSL_SUCCESS ? tsl_backend_vulkan_new(di.index, &cerr) : NULL;
        if (!cbe) fprintf(stderr, "tensile bench model: the copy runs in the decode's context (%s)\n", cerr.message);
    }
    tsl_backend *copy_be = cbe ? cbe : be;
    if (vk ? !bm_vk_copy_init(&vcopy, copy_be, (size_t)copy_mib << 20, &err) : !bm_ceiling_init(&ceil, nth)) {
        if (vk)
            cli_error("bench model", &err);
        else
            fprintf(stderr, "tensile bench model: cannot allocate the copy buffers\n");
        goto done;
    }

    /* decode in rounds, each after its own copy measurement, each round's
     * tokens in graphs of `steps` (the last one of a round may be smaller) */
    enum { BM_ROUNDS = 8 };
    const int rounds = n_gen < BM_ROUNDS ? (int)n_gen : BM_ROUNDS;
    const long long first_chunk = n_gen / rounds < steps ? n_gen / rounds : steps;
    /* warm-up: the allocator's buffer at full prefill size, then a decode */
    if (tsl_llm_decode(c, toks, (int32_t)n_prompt, &err) != TSL_SUCCESS ||
        tsl_llm_decode(c, toks, 1, &err) != TSL_SUCCESS) {
        cli_error("bench model", &err);
        goto done;
    }
    tsl_llm_clear(c);

    double t0 = cli_now();
    if (tsl_llm_decode(c, toks, (int32_t)n_prompt, &err) != TSL_SUCCESS) {
        cli_error("bench model", &err);
        goto done;
    }
    const double t_prefill = cli_now() - t0;
    double copy[BM_ROUNDS], ratio[BM_ROUNDS], wgbs[BM_ROUNDS], t_decode = 0;
    bool copy_gpu = vk;
    bm_split sp = {.gpu_timed = true};
    tsl_sampler_params sparams = tsl_sampler_default_params();
    sparams.temp = 0.0f;
    smp = tsl_sampler_new(&sparams, &err);
    if (!smp) {
        cli_error("bench model", &err);
        goto done;
    }
    int32_t id = tsl_sampler_sample(smp, tsl_llm_logits(c, -1), in->n_vocab);
    /* The decode graph of the first round's size built, kept and recorded
     * before the timing, as a generation has it after its first graphs (the
     * prefill's graph took the recording's place): three of them, then the
     * cache cut back to the prompt, so the timed decode starts there. */
    for (int i = 0; i < 3; i++) {
        int32_t out[TSL_LLM_MAX_STEPS];
        if ((host_greedy ? tsl_llm_decode(c, &toks[i], 1, &err)
                         : tsl_llm_generate_greedy(c, toks[i], (int32_t)first_chunk, out, &err)) != TSL_SUCCESS ||
            tsl_llm_truncate(c, (int32_t)n_prompt, &err) != TSL_SUCCESS) {
            cli_error("bench model", &err);
            goto done;
        }
    }
    long long done_tokens = 0;
    for (int r = 0; r < rounds; r++) {
        const long long k = n_gen * (r + 1) / rounds - done_tokens;
        if (vk) {
            bool gpu;
            copy[r] = bm_vk_copy_gbs(&vcopy, copy_be, 3, &gpu, &err);
            copy_gpu = copy_gpu && gpu;
            if (copy[r] < 0) {
                cli_error("bench model", &err);
                goto done;
            }
        } else {
            copy[r] = bm_copy_gbs(&ceil, 3);
        }
        double ts = cli_now();
        for (long long i = 0; i < k;) {
            const int32_t w = (int32_t)(k - i < steps ? k - i : steps);
            tsl_vulkan_stats s0, s1;
            if (vk) tsl_backend_vulkan_stats(be, &s0);
            double tt = cli_now();
            int32_t next[TSL_LLM_MAX_STEPS];
            if ((host_greedy ? tsl_llm_decode(c, &id, 1, &err) : tsl_llm_generate_greedy(c, id, w, next, &err)) !=
                TSL_SUCCESS) {
                cli_error("bench model", &err);
                goto done;
            }
            const double wall_ms = (cli_now() - tt) * 1e3;
            if (vk) {
                tsl_backend_vulkan_stats(be, &s1);
                bm_split_add(&sp, c, &s0, &s1, wall_ms, w);
            }
            i += w;
            tt = cli_now();
            id = host_greedy ? tsl_sampler_sample(smp, tsl_llm_logits(c, -1), in->n_vocab) : next[w - 1];
            sp.sample_ms += (cli_now() - tt) * 1e3;
            if (id < 0) {
                fprintf(stderr, "tensile bench model: no token could be chosen from the logits (none above -inf)\n");
                goto done;
            }
        }
        const double dt = cli_now() - ts;
        t_decode += dt;
        done_tokens += k;
        wgbs[r] = (double)in->decode_bytes * (double)k / dt * 1e-9;
    }
    /* A shared host's bandwidth moves from second to second: each round
     * against its own copy. A GPU's does not, and a copy run that came out
     * slow says nothing about the device: every round against the best. */
    double copy_best = 0;
    for (int r = 0; r < rounds; r++)
        if (copy[r] > copy_best) copy_best = copy[r];
    for (int r = 0; r < rounds; r++) {
        const double ceiling = vk ? copy_best : copy[r];
        ratio[r] = ceiling > 0 ? wgbs[r] / ceiling : 0;
    }
    const double pp = (double)n_prompt / t_prefill, tg = (double)n_gen / t_decode;
    const double gbs = (double)in->decode_bytes * tg * 1e-9;
    double rsorted[BM_ROUNDS];
    memcpy(rsorted, ratio, sizeof ratio);
    const double ratio_med = bm_median(rsorted, rounds), ratio_min = rsorted[0], ratio_max = rsorted[rounds - 1];
    const double copy_gbs = vk ? copy_best : bm_median(copy, rounds);
    const double nt = sp.tokens > 0 ? sp.tokens : 1;
    const double host_ms = (sp.build_ms + sp.input_ms + sp.sched_ms + sp.resolve_ms + sp.encode_ms) / nt;
    if (json) {
        printf("{\"model\":");
        cli_json_str(stdout, in->name, strlen(in->name));
        printf(",\"arch\":\"%s\",\"type\":\"%s\",\"n_params\":%llu,\"decode_bytes\":%llu,\"backend\":",
               in->arch_name, tsl_type_name(in->weight_type), (unsigned long long)in->n_params,
               (unsigned long long)in->decode_bytes);
        cli_json_str(stdout, tsl_backend_device(be), strlen(tsl_backend_device(be)));
        printf(",\"backend_name\":\"%s\",\"threads\":%d,\"setup_s\":%.3f,\"prompt_n\":%lld,\"prompt_tok_s\":%.3f,"
               "\"gen_n\":%lld,\"gen_tok_s\":%.3f,\"gen_ms_per_tok\":%.3f,\"weights_gbs\":%.3f,\"copy_gbs\":%.3f,"
               "\"copy_ceiling\":\"%s\",\"bw_ratio\":%.4f,\"bw_ratio_min\":%.4f,\"bw_ratio_max\":%.4f,\"greedy\":\"%s\","
               "\"steps\":%lld",
               tsl_backend_name(be), nth, t_setup, n_prompt, pp, n_gen, tg, 1e3 / tg, gbs, copy_gbs,
               vk ? (copy_gpu ? "device copy, gpu time" : "device copy, wall time") : "host copy", ratio_med,
               ratio_min, ratio_max, host_greedy ? "host" : "graph", steps);
        if (vk) {
            llm_devw_info di;
            llm_devw_get_info(llm_ctx_devw(c), &di);
            printf(",\"weight_buffers\":%d,\"weight_buffers_file_layout\":%d,\"weight_device_bytes\":%llu", di.n_buffers,
                   di.n_file_layout, (unsigned long long)di.bytes);
            printf(",\"copy_bytes\":%zu,\"per_token\":{\"wall_ms\":%.4f,\"host_ms\":%.4f,\"graph_ms\":%.4f,"
                   "\"inputs_ms\":%.4f,\"sched_ms\":%.4f,\"resolve_ms\":%.4f,\"encode_submit_ms\":%.4f,\"compute_ms\":%.4f,"
                   "\"logits_ms\":%.4f,\"sample_ms\":%.4f,\"greedy\":\"%s\",\"gpu_ms\":%.4f,\"wait_ms\":%.4f,"
                   "\"gpu_timer\":\"%s\",\"dispatches\":%.1f,"
                   "\"barriers\":%.1f,\"submits\":%.2f,\"reused\":%.2f,\"splits\":%.2f,\"copies\":%.2f}",
                   2 * vcopy.bytes, sp.wall_ms / nt, host_ms, sp.build_ms / nt, sp.input_ms / nt, sp.sched_ms / nt, sp.resolve_ms / nt,
                   sp.encode_ms / nt, sp.compute_ms / nt, sp.output_ms / nt, sp.sample_ms / nt,
                   host_greedy ? "host" : "graph", sp.gpu_ms / nt, sp.wait_ms / nt,
                   sp.gpu_timed ? "timestamps" : "compute wall less encode+submit", sp.dispatches / nt,
                   sp.barriers / nt, sp.submits / nt, sp.reused / nt, sp.splits / nt, sp.copies / nt);
        }
        printf("}\n");
    } else {
        printf("model: %s (%s, %s, %.2f B params, %.1f MB read per token)\n", in->name, in->arch_name,
               tsl_type_name(in->weight_type), (double)in->n_params * 1e-9, (double)in->decode_bytes * 1e-6);
        printf("backend: %s (%s)\n", tsl_backend_device(be), tsl_backend_name(be));
        if (vk) {
            llm_devw_info di;
            llm_devw_get_info(llm_ctx_devw(c), &di);
            printf("setup: %.2f s (KV cache and weights' upload: %.2f GB in %d buffer%s, %d in the file's layout)\n",
                   t_setup, (double)di.bytes * 1e-9, di.n_buffers, di.n_buffers == 1 ? "" : "s", di.n_file_layout);
        }
        printf("prefill: %lld tokens, %.2f tok/s\n", n_prompt, pp);
        printf("decode: %lld tokens, %.2f tok/s (%.2f ms/token; %s, %lld step%s a graph)\n", n_gen, tg, 1e3 / tg,
               host_greedy ? "greedy on the host" : "the graph's argmax", steps, steps == 1 ? "" : "s");
        if (vk) {
            printf("decode weights read: %.2f GB/s; device copy bandwidth: %.2f GB/s (%zu MiB read + written, best "
                   "run, %s time); ratio %.1f%% (median of %d rounds, %.1f%%..%.1f%%)\n",
                   gbs, copy_gbs, (2 * vcopy.bytes) >> 20, copy_gpu ? "GPU" : "wall", 100.0 * ratio_med, rounds,
                   100.0 * ratio_min, 100.0 * ratio_max);
            printf("decode per token: %.3f ms wall; host %.3f ms (graph %.3f, inputs %.3f, scheduling %.3f, resolve %.3f, "
                   "encode+submit %.3f); GPU %.3f ms (%s); waiting %.3f ms (submission, GPU start, wake-up); %s read "
                   "%.3f ms; sampling %.3f ms (%s)\n",
                   sp.wall_ms / nt, host_ms, sp.build_ms / nt, sp.input_ms / nt, sp.sched_ms / nt, sp.resolve_ms / nt,
                   sp.encode_ms / nt,
                   sp.gpu_ms / nt, sp.gpu_timed ? "timestamps" : "estimate: compute wall less resolve and encode+submit",
                   sp.wait_ms / nt, host_greedy ? "logits" : "argmax", sp.output_ms / nt, sp.sample_ms / nt,
                   host_greedy ? "greedy on the host: --greedy host" : "the graph's argmax");
            printf("decode per token: %.0f dispatches, %.0f barriers, %.1f submits (%.1f reused as recorded), %.1f "
                   "split(s), %.1f copies\n",
                   sp.dispatches / nt, sp.barriers / nt, sp.submits / nt, sp.reused / nt, sp.splits / nt,
                   sp.copies / nt);
        } else {
            printf("decode weights read: %.2f GB/s; copy bandwidth: %.2f GB/s (median of %d); ratio %.1f%% "
                   "(median of %d rounds, %.1f%%..%.1f%%)\n",
                   gbs, copy_gbs, rounds, 100.0 * ratio_med, rounds, 100.0 * ratio_min, 100.0 * ratio_max);
        }
    }
    rc = 0;
done:
    tsl_sampler_free(smp);
    bm_ceiling_free(&ceil);
    bm_vk_copy_free(&vcopy);
    tsl_backend_free(cbe);
    free(toks);
    tsl_llm_ctx_free(c);
    tsl_model_free(m);
    tsl_backend_free(be);
    return rc;
}
