/*
 * cli.h - the `strata` command's subcommands. Each takes the arguments after its name and returns
 * the process exit code (0 success, 1 failure, 2 usage error).
 */
#ifndef STRATA_CLI_H
#define STRATA_CLI_H

#include <stdbool.h>

#include "common/error.h"
#include "rpc/rpc.h"

/* True if arg is -name or --name. */
bool cli_flag_is(const char *arg, const char *name);
/* The gRPC clients' connection flags: --tls, --tls-ca FILE, --tls-cert FILE, --tls-key FILE,
 * --tls-server-name NAME, --bearer-token-file FILE, into o. Returns how many arguments it took
 * (0: arg is none of them; 2: the flag and value), or -1 with err set for a missing value. */
/* A flag's value that counts something (--top N): a whole number 0..INT32_MAX, else
 * INVALID_ARGUMENT naming the flag and the value. */
int cli_count_flag(const char *arg, const char *value, int *out, strata_error *err);
int cli_channel_flag(const char *arg, const char *value, rpc_channel_options *o, strata_error *err);

int cli_run_services(const char *mode, int argc, char **argv); /* all, ingester */
int cli_push(int argc, char **argv);
int cli_query(int argc, char **argv);
int cli_block(int argc, char **argv);
int cli_bucket(int argc, char **argv);

#endif
