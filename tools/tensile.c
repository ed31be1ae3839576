/*
 * tensile.c - the command-line front end: dispatches `tensile <command>` to
 * the module that implements it (tools/<command>.c). Each command parses its
 * own flags and prints its own usage.
 */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "tensile/backend.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} command;

static int cmd_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("tensile %s (simd: %s)\n", TSL_VERSION_STRING, tsl_cpu_simd_name());
    return 0;
}

static const command COMMANDS[] = {
    {"version", cmd_version, "print the version and the CPU kernel set"},
    {"demo", cmd_demo, "run a small graph on the CPU and print its result and timing"},
    {"bench", cmd_bench, "benchmarks: `tensile bench ops [--json] [--threads N]`"},
    {"run", cmd_run, "generate text with a GGUF model: `tensile run -m FILE -p PROMPT`"},
    {"eval", cmd_eval, "write a prompt's logits for every token: `tensile eval -m FILE --ids ... --out F`"},
    {"gen-model", cmd_gen_model, "write a random-weight model of a real model's shape"},
    {"drill", cmd_drill, "inject every fault class at every point of a small graph: `tensile drill [--json]`"},
    {"doctor", cmd_doctor, "list backends, build every kernel, run a short drill, give a verdict per backend"},
};
#define N_COMMANDS (int)(sizeof COMMANDS / sizeof COMMANDS[0])

static void usage(FILE *f) {
    fprintf(f, "usage: tensile <command> [options]\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-10s %s\n", COMMANDS[i].name, COMMANDS[i].help);
    fprintf(f, "\n`tensile <command> --help` for a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) return cmd_version(0, NULL);
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "tensile: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
