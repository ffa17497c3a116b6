/*
 * cli.h - the `strata` command's subcommands. Each takes the arguments after its name and returns
 * the process exit code (0 success, 1 failure, 2 usage error).
 */
#ifndef STRATA_CLI_H
#define STRATA_CLI_H

#include <stdbool.h>

/* True if arg is -name or --name. */
bool cli_flag_is(const char *arg, const char *name);

int cli_run_services(const char *mode, int argc, char **argv); /* all, ingester */
int cli_push(int argc, char **argv);
int cli_query(int argc, char **argv);
int cli_block(int argc, char **argv);
int cli_bucket(int argc, char **argv);

#endif
