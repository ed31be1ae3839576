/*
 * eval.c - `tensile eval`: run a prompt and write the logits of every one of
 * its tokens, for comparison against an independent reference (the numpy
 * forward pass in tests/).
 *
 * The output is raw little-endian float32, [n_tokens][n_vocab], nothing
 * else, so a reader needs no parser (numpy.fromfile). The prompt is either
 * ids (--ids) or text (--text, tokenized as `tensile run` does: BOS/EOS as
 * the vocabulary asks, special tokens parsed; the ids are printed on stdout
 * as one line, and --ids-only stops there). --batch splits the prompt into
 * graphs of N tokens, so the reference can check that batching changes
 * nothing.
 */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "llm_cli.h"

static void eval_usage(FILE *f) {
    fprintf(f, "usage: tensile eval -m FILE (--ids \"1 2 3\" | --text TEXT) --out FILE [options]\n"
               "  --ids LIST       token ids separated by spaces or commas\n"
               "  --text TEXT      tokenize TEXT (its ids are printed on stdout)\n"
               "  --ids-only       with --text: print the ids and exit\n"
               "  --out FILE       raw little-endian float32 logits, [n_tokens][n_vocab]\n"
               "  --batch N        tokens per graph (default: all at once)\n"
               "  --kv-type T      f16 (default) or f32\n"
               "  --backend B      cpu | vulkan | auto (default auto: the first Vulkan GPU, else the CPU)\n"
               "  --device N       the Vulkan device (default: TSL_VULKAN_DEVICE or the first GPU)\n"
               "  --threads T      CPU threads (default: online cores)\n");
}

/* Ids from "1 2, 3". Returns the count, or -1 (with a message) on a bad one. */
static int32_t eval_parse_ids(const char *s, int32_t **out) {
    size_t cap = 64;
    int32_t n = 0, *ids = malloc(cap * sizeof *ids);
    if (!ids) return -1;
    while (*s) {
        while (*s == ' ' || *s == ',' || *s == '\t' || *s == '\n') s++;
        if (!*s) break;
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "tensile eval: --ids: '%.20s' is not a token id\n", s);
            free(ids);
            return -1;
        }
        if ((size_t)n == cap) {
            int32_t *b = realloc(ids, 2 * cap * sizeof *ids);
            if (!b) {
                free(ids);
                return -1;
            }
            ids = b;
            cap *= 2;
        }
        ids[n++] = (int32_t)v;
        s = end;
    }
    *out = ids;
    return n;
}

int cmd_eval(int argc, char **argv) {
    const char *model = NULL, *ids_s = NULL, *text = NULL, *out = NULL, *backend = "auto";
    long long batch = 0, threads = 0, device = -1;
    bool ids_only = false;
    tsl_type kv_type = TSL_TYPE_F16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            eval_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--ids-only")) {
            ids_only = true;
        } else if (!v) {
            fprintf(stderr, "tensile eval: unknown option or missing value '%s'\n", a);
            eval_usage(stderr);
            return 2;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            model = argv[++i];
        } else if (!strcmp(a, "--ids")) {
            ids_s = argv[++i];
        } else if (!strcmp(a, "--text")) {
            text = argv[++i];
        } else if (!strcmp(a, "--out") || !strcmp(a, "-o")) {
            out = argv[++i];
        } else if (!strcmp(a, "--backend")) {
            backend = argv[++i];
        } else if (!strcmp(a, "--batch")) {
            if (!cli_int(v, 1, 1 << 20, &batch)) {
                fprintf(stderr, "tensile eval: --batch wants a positive number, got '%s'\n", v);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--device")) {
            if (!cli_int(v, 0, 1 << 20, &device)) {
                fprintf(stderr, "tensile eval: --device wants a device index >= 0, got '%s'\n", v);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--threads")) {
            if (!cli_int(v, 1, 1024, &threads)) {
                fprintf(stderr, "tensile eval: --threads wants 1..1024, got '%s'\n", v);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--kv-type")) {
            int t = tsl_type_from_name(v);
            if (t != TSL_TYPE_F16 && t != TSL_TYPE_F32) {
                fprintf(stderr, "tensile eval: --kv-type wants f16 or f32, got '%s'\n", v);
                return 2;
            }
            kv_type = (tsl_type)t;
            i++;
        } else {
            fprintf(stderr, "tensile eval: unknown option '%s'\n", a);
            eval_usage(stderr);
            return 2;
        }
    }
    if (!model || (!ids_s == !text) || (!out && !ids_only) || (ids_only && !text)) {
        fprintf(stderr, "tensile eval: needs -m FILE, one of --ids or --text, and --out FILE (or --text with "
                        "--ids-only)\n");
        eval_usage(stderr);
        return 2;
    }

    int rc = 1, code = 0;
    int32_t *ids = NULL, n = 0;
    tsl_backend *be = NULL;
    tsl_llm_ctx *c = NULL;
    FILE *f = NULL;
    tsl_error err;
    tsl_model_params mp = tsl_model_default_params();
    mp.progress = false;
    mp.prefetch = !ids_only;
    tsl_model *m = tsl_model_load(model, &mp, &err);
    if (!m) {
        cli_error("eval", &err);
        return 1;
    }
    if (text) {
        n = tsl_llm_tokenize(m, text, strlen(text), true, true, NULL, 0);
        ids = n > 0 ? malloc((size_t)n * sizeof *ids) : NULL;
        if (n <= 0 || !ids || tsl_llm_tokenize(m, text, strlen(text), true, true, ids, n) != n) {
            fprintf(stderr, "tensile eval: the text gives no tokens\n");
            goto done;
        }
        for (int32_t i = 0; i < n; i++) printf("%s%d", i ? " " : "", (int)ids[i]);
        printf("\n");
        fflush(stdout);
        if (ids_only) {
            rc = 0;
            goto done;
        }
    } else {
        n = eval_parse_ids(ids_s, &ids);
        if (n < 0) {
            rc = 2;
            goto done;
        }
        if (n == 0) {
            fprintf(stderr, "tensile eval: --ids holds no ids\n");
            rc = 2;
            goto done;
        }
    }
    be = cli_backend_dev("eval", backend, (int)device, (int)threads, &code);
    if (!be) {
        rc = code;
        goto done;
    }
    tsl_llm_params lp = tsl_llm_default_params();
    lp.backend = be;
    lp.n_ctx = n;
    lp.n_batch = batch ? (int32_t)batch : n;
    lp.kv_type = kv_type;
    lp.logits_all = true;
    c = tsl_llm_ctx_new(m, &lp, &err);
    if (!c) {
        cli_error("eval", &err);
        goto done;
    }
    if (tsl_llm_decode(c, ids, n, &err) != TSL_SUCCESS) {
        cli_error("eval", &err);
        goto done;
    }
    const int32_t nv = tsl_model_get_info(m)->n_vocab;
    f = fopen(out, "wb");
    if (!f) {
        fprintf(stderr, "tensile eval: cannot open '%s' for writing: %s\n", out, strerror(errno));
        goto done;
    }
    for (int32_t i = 0; i < n; i++) {
        if (fwrite(tsl_llm_logits(c, i), sizeof(float), (size_t)nv, f) != (size_t)nv) {
            fprintf(stderr, "tensile eval: writing '%s' failed: %s\n", out, strerror(errno));
            goto done;
        }
    }
    if (fclose(f) != 0) {
        f = NULL;
        fprintf(stderr, "tensile eval: writing '%s' failed: %s\n", out, strerror(errno));
        goto done;
    }
    f = NULL;
    rc = 0;
done:
    if (f) fclose(f);
    free(ids);
    tsl_llm_ctx_free(c);
    tsl_model_free(m);
    tsl_backend_free(be);
    return rc;
}
