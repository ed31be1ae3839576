/*
 * commands.h - the CLI's subcommands. Each lives in its own file under tools/
 * and returns the process exit code (0 success, 1 failure, 2 usage error).
 */
#ifndef TSL_COMMANDS_H
#define TSL_COMMANDS_H

int cmd_demo(int argc, char **argv);   /* tools/demo.c */
int cmd_bench(int argc, char **argv);  /* tools/bench.c: `tensile bench ops ...` */

#endif
