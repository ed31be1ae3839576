/*
 * gen_model.c - `tensile gen-model`: write a random-weight GGUF model of a
 * real model's shape (src/model/synth.c does the work).
 *
 * For benchmarks on machines with no network and no Python: a Qwen2.5-0.5B
 * or Llama-3-8B-shaped file in seconds, with a valid byte-level BPE
 * vocabulary so `tensile run` and `tensile eval --text` work on it. The
 * output is the same for the same options and seed.
 *
 * Tensor data is aligned to 256 bytes by default (general.alignment), the
 * placement alignment of Vulkan buffers: a GPU context can then hold the
 * weights in the file's own layout and restore them from the mapping after
 * a device loss without a host copy (src/model/weights.c). --align 32 gives
 * the layout most llama.cpp files have.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "llm_cli.h"
#include "model/llm_impl.h"

static void gen_usage(FILE *f) {
    fprintf(f,
            "usage: tensile gen-model --shape NAME --type f32|f16|q8_0|q4_0 -o FILE\n"
            "                         [--arch llama|qwen2|qwen3] [--seed S] [--layers N] [--threads T]\n"
            "                         [--align A]\n"
            "  Writes a random-weight GGUF model of a real model's shape, with a synthetic\n"
            "  byte-level BPE vocabulary.\n"
            "  --shape NAME   %s\n"
            "  --arch A       architecture (default: the shape's own)\n"
            "  --type T       type of the weight matrices (norms are f32)\n"
            "  --seed S       weights and vocabulary seed (default 1)\n"
            "  --layers N     override the shape's layer count\n"
            "  --threads T    threads generating weights (default: online cores)\n"
            "  --align A      alignment of the tensor data, a power of two >= 32 (default 256)\n",
            synth_shape_names());
}

int cmd_gen_model(int argc, char **argv) {
    const char *shape = NULL, *out = NULL, *arch = NULL, *type = NULL;
    unsigned long long seed = 1;
    long long layers = 0, threads = 0, align = 256;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const bool has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            gen_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--shape") && has) {
            shape = argv[++i];
        } else if (!strcmp(a, "--arch") && has) {
            arch = argv[++i];
        } else if (!strcmp(a, "--type") && has) {
            type = argv[++i];
        } else if ((!strcmp(a, "-o") || !strcmp(a, "--out")) && has) {
            out = argv[++i];
        } else if (!strcmp(a, "--seed") && has) {
            if (!cli_u64(argv[++i], &seed)) {
                fprintf(stderr, "tensile gen-model: --seed wants a non-negative integer, got '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--layers") && has) {
            if (!cli_int(argv[++i], 1, 4096, &layers)) {
                fprintf(stderr, "tensile gen-model: --layers wants 1..4096, got '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--align") && has) {
            if (!cli_int(argv[++i], 32, 1 << 20, &align) || (align & (align - 1))) {
                fprintf(stderr, "tensile gen-model: --align wants a power of two in 32..1048576, got '%s'\n",
                        argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--threads") && has) {
            if (!cli_int(argv[++i], 1, 1024, &threads)) {
                fprintf(stderr, "tensile gen-model: --threads wants 1..1024, got '%s'\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "tensile gen-model: unknown or incomplete option '%s'\n", a);
            gen_usage(stderr);
            return 2;
        }
    }
    if (!shape || !out || !type) {
        fprintf(stderr, "tensile gen-model: --shape, --type and -o are required\n");
        gen_usage(stderr);
        return 2;
    }
    const synth_shape *sh = synth_find_shape(shape);
    if (!sh) {
        fprintf(stderr, "tensile gen-model: unknown shape '%s' (%s)\n", shape, synth_shape_names());
        return 2;
    }
    synth_params p;
    memset(&p, 0, sizeof p);
    p.shape = *sh;
    if (arch) {
        if (!strcmp(arch, "llama")) p.shape.arch = TSL_ARCH_LLAMA;
        else if (!strcmp(arch, "qwen2")) p.shape.arch = TSL_ARCH_QWEN2;
        else if (!strcmp(arch, "qwen3")) p.shape.arch = TSL_ARCH_QWEN3;
        else {
            fprintf(stderr, "tensile gen-model: unknown architecture '%s' (llama, qwen2, qwen3)\n", arch);
            return 2;
        }
    }
    int t = tsl_type_from_name(type);
    if (t != TSL_TYPE_F32 && t != TSL_TYPE_F16 && t != TSL_TYPE_Q8_0 && t != TSL_TYPE_Q4_0) {
        fprintf(stderr, "tensile gen-model: --type wants f32, f16, q8_0 or q4_0, got '%s'\n", type);
        return 2;
    }
    p.type = (tsl_type)t;
    if (layers) p.shape.n_layer = (int32_t)layers;
    p.seed = seed;
    p.n_threads = (int)threads;
    p.alignment = (uint32_t)align;

    double t0 = cli_now();
    tsl_error err;
    if (synth_write(&p, out, &err) != TSL_SUCCESS) {
        cli_error("gen-model", &err);
        return 1;
    }
    double dt = cli_now() - t0;
    FILE *f = fopen(out, "rb");
    long long size = -1;
    if (f) {
        if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
        fclose(f);
    }
    printf("wrote %s: %s-shaped %s model, %d layers, %s, %.1f MB in %.1f s\n", out, shape,
           tsl_llm_arch_name(p.shape.arch), (int)p.shape.n_layer, tsl_type_name(p.type), (double)size / 1e6, dt);
    return 0;
}
