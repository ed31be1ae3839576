/*
 * commands.h - the CLI's subcommands. Each lives in its own file under tools/
 * and returns the process exit code (0 success, 1 failure, 2 usage error).
 */
#ifndef TSL_COMMANDS_H
#define TSL_COMMANDS_H

int cmd_demo(int argc, char **argv);   /* tools/demo.c */
int cmd_bench(int argc, char **argv);  /* tools/bench.c: `tensile bench ops ...` */
int cmd_run(int argc, char **argv);       /* tools/run.c: `tensile run -m FILE -p PROMPT` */
int cmd_eval(int argc, char **argv);      /* tools/eval.c: `tensile eval -m FILE --ids ... --out FILE` */
int cmd_gen_model(int argc, char **argv); /* tools/gen_model.c: `tensile gen-model ...` */
/* tools/bench_model.c: `tensile bench model ...`; argv[0] is "model" */
int bench_model(int argc, char **argv);
int cmd_drill(int argc, char **argv);     /* tools/drill.c: `tensile drill [--backend B] [--json] [--quick]` */
int cmd_doctor(int argc, char **argv);    /* tools/doctor.c: `tensile doctor [--json]` */

#endif
