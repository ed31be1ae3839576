/*
 * run.c - `tensile run`: generate text from a prompt with a GGUF model.
 *
 * The text is printed as it is generated, one flush per token. A token's
 * bytes may end inside a UTF-8 character (byte-level vocabularies split
 * multi-byte characters across tokens), so output is held back until the
 * character is complete; a terminal never sees half a character. At the end
 * one line on stderr gives prompt and generation speed; --json instead
 * prints one object with the tokens, the text and the timings.
 *
 * Greedy decoding (--temp 0, no repetition penalty) lets the graph choose:
 * the logits' argmax is taken on the device, and --steps decode steps go
 * into one graph (tsl_llm_generate_greedy), each embedding the last one's
 * choice, so the text comes in runs of that many tokens, and is the text
 * one step a graph gives.
 *
 * Failures: a compute that fails prints its error record's line (the one
 * tsl_error_format makes) and the command exits 1. A transient RETRY is
 * retried inside decode by the context's retry policy before it ever gets
 * here. A DEVICE_LOST is recovered from: the backend is recovered
 * (tsl_backend_recover: new device objects, weights restored, the KV cache
 * zeroed and marked lost), and the same decode is made again, which first
 * re-runs the token history into the cache. The sampler never sees the
 * failure, so the text is the one a fault-free run with the same seed
 * gives. A device that is lost again right after recovering gives up after
 * a few rounds.
 */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "llm_cli.h"

typedef struct run_opts {
    const char *model, *prompt, *backend;
    long long n_predict, threads, n_ctx, n_batch, device, steps;
    tsl_sampler_params sp;
    tsl_type kv_type;
    bool json, quiet, ignore_eos;
} run_opts;

static void run_usage(FILE *f) {
    fprintf(f, "usage: tensile run -m FILE -p PROMPT [options]\n"
               "  -n N                  tokens to generate (default 128; stops early at end of generation)\n"
               "  --seed S              sampler seed (default 0)\n"
               "  --temp T              temperature (default 0.8; 0 = greedy)\n"
               "  --top-k K             keep the K most likely tokens (default 40; 0 = off)\n"
               "  --top-p P             keep the smallest set holding P of the mass (default 0.95; 1 = off)\n"
               "  --min-p M             drop tokens below M x the best one's probability (default 0.05)\n"
               "  --repeat-penalty R    penalize recent tokens (default 1 = off)\n"
               "  --repeat-last-n N     window of the penalty (default 64)\n"
               "  --backend B           cpu | vulkan | auto (default auto: the first Vulkan GPU, else the CPU)\n"
               "  --device N            the Vulkan device (see tensile doctor; default: TSL_VULKAN_DEVICE or the first GPU)\n"
               "  --threads T           CPU threads (default: online cores)\n"
               "  --ctx N               context positions (default: the model's, at most 4096)\n"
               "  --batch N             prompt tokens per graph (default 512)\n"
               "  --kv-type T           f16 (default) or f32\n"
               "  --steps N             greedy (--temp 0): decode steps per graph, 1..32 (default 1)\n"
               "  --ignore-eos          keep generating after an end-of-generation token\n"
               "  --json                print one JSON object with tokens, text and timings\n"
               "  --quiet               no progress bar\n");
}

/* Bytes of buf[0..n) that form complete UTF-8 characters from the start:
 * the tail of an unfinished character is held back. Invalid bytes are not
 * held (they will never complete). */
static size_t run_utf8_complete(const unsigned char *buf, size_t n) {
    size_t i = n, back = 0;
    while (i > 0 && back < 4) {
        i--, back++;
        unsigned c = buf[i];
        if ((c & 0xC0) == 0x80) continue; /* continuation: look further back */
        size_t need = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
        return need > back ? i : n;
    }
    return n;
}

typedef struct run_text {
    char *buf;
    size_t len, cap, printed;
} run_text;

static bool run_text_add(run_text *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        while (cap < t->len + n + 1) cap *= 2;
        char *b = realloc(t->buf, cap);
        if (!b) return false;
        t->buf = b;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = 0;
    return true;
}

/* Print what is complete of the text so far (all of it when final). */
static void run_text_flush(run_text *t, bool final) {
    size_t upto = final ? t->len
                        : t->printed + run_utf8_complete((const unsigned char *)t->buf + t->printed, t->len - t->printed);
    if (upto > t->printed) {
        fwrite(t->buf + t->printed, 1, upto - t->printed, stdout);
        fflush(stdout);
        t->printed = upto;
    }
}

static int run_parse(int argc, char **argv, run_opts *o) {
    memset(o, 0, sizeof *o);
    o->backend = "auto";
    o->device = -1;
    o->n_predict = 128;
    o->sp = tsl_sampler_default_params();
    o->kv_type = TSL_TYPE_F16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const bool has = i + 1 < argc;
        const char *v = has ? argv[i + 1] : NULL;
        long long n;
        double d;
        unsigned long long u;
#define BAD(what)                                                                                       \
    do {                                                                                                \
        fprintf(stderr, "tensile run: %s wants %s, got '%s'\n", a, what, v);                           \
        return 2;                                                                                       \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            run_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "--quiet")) {
            o->quiet = true;
        } else if (!strcmp(a, "--ignore-eos")) {
            o->ignore_eos = true;
        } else if (!has) {
            fprintf(stderr, "tensile run: unknown option or missing value '%s'\n", a);
            run_usage(stderr);
            return 2;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            o->model = argv[++i];
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            o->prompt = argv[++i];
        } else if (!strcmp(a, "--backend")) {
            o->backend = argv[++i];
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (!cli_int(v, 0, 1 << 30, &o->n_predict)) BAD("a number >= 0");
            i++;
        } else if (!strcmp(a, "--seed")) {
            if (!cli_u64(v, &u)) BAD("a non-negative integer");
            o->sp.seed = u;
            i++;
        } else if (!strcmp(a, "--temp")) {
            if (!cli_float(v, 0, 1e6, &d)) BAD("a number >= 0");
            o->sp.temp = (float)d;
            i++;
        } else if (!strcmp(a, "--top-k")) {
            if (!cli_int(v, 0, 1 << 30, &n)) BAD("a number >= 0");
            o->sp.top_k = (int32_t)n;
            i++;
        } else if (!strcmp(a, "--top-p")) {
            if (!cli_float(v, 0, 1, &d)) BAD("a number in [0, 1]");
            o->sp.top_p = (float)d;
            i++;
        } else if (!strcmp(a, "--min-p")) {
            if (!cli_float(v, 0, 1, &d)) BAD("a number in [0, 1]");
            o->sp.min_p = (float)d;
            i++;
        } else if (!strcmp(a, "--repeat-penalty")) {
            if (!cli_float(v, 1e-6, 1e6, &d)) BAD("a positive number");
            o->sp.repeat_penalty = (float)d;
            i++;
        } else if (!strcmp(a, "--repeat-last-n")) {
            if (!cli_int(v, 0, 1 << 20, &n)) BAD("a number >= 0");
            o->sp.repeat_last_n = (int32_t)n;
            i++;
        } else if (!strcmp(a, "--device")) {
            if (!cli_int(v, 0, 1 << 20, &o->device)) BAD("a device index >= 0");
            i++;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            if (!cli_int(v, 1, 1024, &o->threads)) BAD("1..1024");
            i++;
        } else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) {
            if (!cli_int(v, 1, 1 << 24, &o->n_ctx)) BAD("a positive number");
            i++;
        } else if (!strcmp(a, "--batch") || !strcmp(a, "-b")) {
            if (!cli_int(v, 1, 1 << 20, &o->n_batch)) BAD("a positive number");
            i++;
        } else if (!strcmp(a, "--steps")) {
            if (!cli_int(v, 1, TSL_LLM_MAX_STEPS, &o->steps)) BAD("1..32");
            i++;
        } else if (!strcmp(a, "--kv-type")) {
            int t = tsl_type_from_name(v);
            if (t != TSL_TYPE_F16 && t != TSL_TYPE_F32) BAD("f16 or f32");
            o->kv_type = (tsl_type)t;
            i++;
        } else {
            fprintf(stderr, "tensile run: unknown option '%s'\n", a);
            run_usage(stderr);
            return 2;
        }
#undef BAD
    }
    if (!o->model || !o->prompt) {
        fprintf(stderr, "tensile run: -m FILE and -p PROMPT are required\n");
        run_usage(stderr);
        return 2;
    }
    return -1;
}

static void run_json(const run_opts *o, const tsl_model *m, const tsl_backend *be, const int32_t *prompt, int32_t np,
                     const int32_t *gen, int32_t ng, const run_text *text, double t_prompt, double t_gen,
                     const char *stop) {
    printf("{\"model\":");
    cli_json_str(stdout, tsl_model_get_info(m)->name, strlen(tsl_model_get_info(m)->name));
    printf(",\"backend\":");
    cli_json_str(stdout, tsl_backend_device(be), strlen(tsl_backend_device(be)));
    printf(",\"seed\":%llu,\"prompt_tokens\":[", (unsigned long long)o->sp.seed);
    for (int32_t i = 0; i < np; i++) printf("%s%d", i ? "," : "", (int)prompt[i]);
    printf("],\"tokens\":[");
    for (int32_t i = 0; i < ng; i++) printf("%s%d", i ? "," : "", (int)gen[i]);
    printf("],\"text\":");
    cli_json_str(stdout, text->buf ? text->buf : "", text->len);
    printf(",\"prompt_n\":%d,\"prompt_s\":%.6f,\"prompt_tok_s\":%.3f", (int)np, t_prompt,
           t_prompt > 0 ? np / t_prompt : 0.0);
    printf(",\"gen_n\":%d,\"gen_s\":%.6f,\"gen_tok_s\":%.3f,\"stop\":\"%s\"}\n", (int)ng, t_gen,
           t_gen > 0 ? ng / t_gen : 0.0, stop);
    fflush(stdout);
}

#define RUN_MAX_RECOVERIES 3

/* Decode toks, recovering the device when it is lost (see the top of the
 * file). With next, the graph also picks the greedy next token (only its
 * id comes back from a device, not the logits); with gen > 0, toks[0] is
 * decoded and gen greedy tokens are generated into next[0..gen), several
 * decode steps to a graph (tsl_llm_generate_greedy). */
static tsl_status run_decode(tsl_llm_ctx *c, const int32_t *toks, int32_t n, int32_t *next, int32_t gen,
                             int *recoveries, tsl_error *err) {
    for (;;) {
        tsl_status s = gen > 0 ? tsl_llm_generate_greedy(c, toks[0], gen, next, err)
                       : next  ? tsl_llm_decode_greedy(c, toks, n, next, err)
                               : tsl_llm_decode(c, toks, n, err);
        if (s != TSL_DEVICE_LOST || *recoveries >= RUN_MAX_RECOVERIES) return s;
        (*recoveries)++;
        cli_error("run", err);
        tsl_error rerr;
        tsl_backend *be = tsl_llm_backend(c);
        if (tsl_backend_recover(be, &rerr) != TSL_SUCCESS) {
            *err = rerr;
            return rerr.status;
        }
        fprintf(stderr, "tensile run: device recovered in %.1f ms; rebuilding the KV cache from %d tokens\n",
                tsl_backend_last_recovery_ms(be), (int)tsl_llm_n_past(c));
    }
}

int cmd_run(int argc, char **argv) {
    run_opts o;
    int rc = run_parse(argc, argv, &o);
    if (rc >= 0) return rc;

    int code = 0;
    tsl_backend *be = cli_backend_dev("run", o.backend, (int)o.device, (int)o.threads, &code);
    if (!be) return code;
    tsl_error err;
    tsl_model_params mp = tsl_model_default_params();
    mp.progress = !o.quiet && !o.json;
    /* a GPU reads the weights once, uploading them; paging them in first
     * would only read the file twice */
    mp.prefetch = tsl_backend_cpu_threads(be) > 0;
    tsl_model *m = tsl_model_load(o.model, &mp, &err);
    tsl_llm_ctx *c = NULL;
    tsl_sampler *smp = NULL;
    int32_t *prompt = NULL, *gen = NULL;
    run_text text = {0};
    rc = 1;
    if (!m) {
        cli_error("run", &err);
        goto done;
    }
    tsl_llm_params lp = tsl_llm_default_params();
    lp.backend = be;
    lp.n_ctx = (int32_t)o.n_ctx;
    lp.n_batch = (int32_t)o.n_batch;
    lp.kv_type = o.kv_type;
    lp.n_steps = (int32_t)o.steps;
    c = tsl_llm_ctx_new(m, &lp, &err);
    smp = c ? tsl_sampler_new(&o.sp, &err) : NULL;
    if (!c || !smp) {
        cli_error("run", &err);
        goto done;
    }
    const size_t plen = strlen(o.prompt);
    int32_t np = tsl_llm_tokenize(m, o.prompt, plen, true, true, NULL, 0);
    prompt = np > 0 ? malloc((size_t)np * sizeof *prompt) : NULL;
    if (np <= 0 || !prompt || tsl_llm_tokenize(m, o.prompt, plen, true, true, prompt, np) != np) {
        fprintf(stderr, "tensile run: the prompt gives no tokens%s\n", np < 0 ? " (tokenizer error)" : "");
        goto done;
    }
    if (np >= tsl_llm_n_ctx(c)) {
        fprintf(stderr, "tensile run: the prompt is %d tokens; the context holds %d (use --ctx)\n", (int)np,
                (int)tsl_llm_n_ctx(c));
        goto done;
    }
    gen = malloc(((size_t)o.n_predict + 1) * sizeof *gen);
    if (!gen) {
        fprintf(stderr, "tensile run: out of memory\n");
        goto done;
    }
    for (int32_t i = 0; i < np; i++) tsl_sampler_accept(smp, prompt[i]);

    const int32_t n_vocab = tsl_model_get_info(m)->n_vocab;
    const char *stop = "length";
    double t0 = cli_now();
    int recoveries = 0;
    /* greedy without a penalty: the graph's argmax is the sampler's choice */
    const bool greedy = o.sp.temp <= 0.0f && (o.sp.repeat_penalty == 1.0f || o.sp.repeat_last_n == 0);
    /* greedy: the ids the graph chose, q[qi..nq) not yet printed; the
     * cache holds the tokens up to the one before q[nq - 1] */
    int32_t q[TSL_LLM_MAX_STEPS];
    int32_t qi = 0, nq = 1;
    const int32_t steps = tsl_llm_n_steps(c);
    if (run_decode(c, prompt, np, greedy ? q : NULL, 0, &recoveries, &err) != TSL_SUCCESS) {
        cli_error("run", &err);
        goto done;
    }
    double t1 = cli_now();
    int32_t ng = 0;
    char piece[256];
    while (ng < o.n_predict) {
        int32_t id = greedy ? q[qi++] : tsl_sampler_sample(smp, tsl_llm_logits(c, -1), n_vocab);
        if (id < 0) {
            fprintf(stderr, "tensile run: no token could be sampled (every logit is -inf or NaN)\n");
            goto done;
        }
        tsl_sampler_accept(smp, id);
        if (!o.ignore_eos && tsl_llm_token_is_eog(m, id)) {
            stop = "eog";
            break;
        }
        gen[ng++] = id;
        int64_t k = tsl_llm_token_piece(m, id, piece, sizeof piece);
        if (k > 0) {
            char *big = NULL;
            const char *src = piece;
            if ((size_t)k >= sizeof piece) { /* a long token: ask again with room */
                big = malloc((size_t)k + 1);
                if (big) tsl_llm_token_piece(m, id, big, (size_t)k + 1);
                src = big;
            }
            if (!src || !run_text_add(&text, src, (size_t)k)) {
                free(big);
                fprintf(stderr, "tensile run: out of memory\n");
                goto done;
            }
            free(big);
            if (!o.json) run_text_flush(&text, false);
        }
        if (ng == o.n_predict) break;
        if (greedy && qi < nq) continue; /* chosen already */
        if (tsl_llm_n_past(c) >= tsl_llm_n_ctx(c)) {
            stop = "ctx";
            break;
        }
        /* greedy: as many steps as are wanted and fit, at most a graph's */
        int32_t want = 0;
        if (greedy) {
            want = (int32_t)(o.n_predict - ng);
            if (want > steps) want = steps;
            if (want > tsl_llm_n_ctx(c) - tsl_llm_n_past(c)) want = tsl_llm_n_ctx(c) - tsl_llm_n_past(c);
            qi = 0, nq = want;
        }
        if (run_decode(c, &id, 1, greedy ? q : NULL, want, &recoveries, &err) != TSL_SUCCESS) {
            if (!o.json) run_text_flush(&text, true), fputc('\n', stdout), fflush(stdout);
            cli_error("run", &err);
            goto done;
        }
    }
    double t2 = cli_now();
    if (o.json) {
        run_json(&o, m, be, prompt, np, gen, ng, &text, t1 - t0, t2 - t1, stop);
    } else {
        run_text_flush(&text, true);
        fputc('\n', stdout);
        fflush(stdout);
        fprintf(stderr, "prompt: %d tokens, %.2f tok/s; generation: %d tokens, %.2f tok/s\n", (int)np,
                t1 > t0 ? np / (t1 - t0) : 0.0, (int)ng, t2 > t1 ? ng / (t2 - t1) : 0.0);
    }
    rc = 0;
done:
    free(text.buf);
    free(gen);
    free(prompt);
    tsl_sampler_free(smp);
    tsl_llm_ctx_free(c);
    tsl_model_free(m);
    tsl_backend_free(be);
    return rc;
}
