/*
 * main.c - the one Strata binary: any service, all of them in one process, and the client tools.
 *
 *   strata all -config FILE          every service in one process (UI on :7070)
 *   strata ingester -config FILE     one service (ingester, querier, scraper, compactor)
 *   strata push FILE... [flags]      push pprof files through WriteRaw
 *   strata block dump PATH           print a block's meta, series, profiles and top stacks
 *   strata version
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "config/config.h"
#ifdef STRATA_WITH_AGENT
#include "agent_cli.h"
#endif

#ifndef STRATA_VERSION
#define STRATA_VERSION "dev"
#endif

bool cli_flag_is(const char *arg, const char *name) {
    if (arg[0] != '-')
        return false;
    arg += arg[1] == '-' ? 2 : 1;
    return strcmp(arg, name) == 0;
}

int cli_count_flag(const char *arg, const char *value, int *out, strata_error *err) {
    int64_t n;
    if (!config_parse_int64(value, &n) || n < 0 || n > INT32_MAX)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "%s: \"%.64s\" is not a count (0 to 2147483647)", arg, value);
    *out = (int)n;
    return 0;
}

int cli_channel_flag(const char *arg, const char *value, rpc_channel_options *o,
                     strata_error *err) {
    if (cli_flag_is(arg, "tls")) {
        o->tls = true;
        return 1;
    }
    static const struct {
        const char *name;
        size_t offset;
    } flags[] = {
        {"tls-ca", offsetof(rpc_channel_options, tls_ca_file)},
        {"tls-cert", offsetof(rpc_channel_options, tls_cert_file)},
        {"tls-key", offsetof(rpc_channel_options, tls_key_file)},
        {"tls-server-name", offsetof(rpc_channel_options, tls_server_name)},
        {"bearer-token-file", offsetof(rpc_channel_options, bearer_token_file)},
    };
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (cli_flag_is(arg, flags[i].name)) {
            if (value == NULL)
                return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s needs a value", arg);
            *(const char **)((char *)o + flags[i].offset) = value;
            return 2;
        }
    return 0;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: strata COMMAND [ARGS]\n"
            "\n"
            "services:\n"
            "  all -config FILE [-check-config]       run every service in one process\n"
            "  ingester -config FILE [-check-config]  run the ingester (WriteRaw, Agents)\n"
            "  querier -config FILE [-check-config]   run the querier (QueryService, JSON API)\n"
            "  scraper -config FILE [-check-config]   run the scraper (scrape_configs, Targets);\n"
            "                                          SIGHUP reloads scrape_configs\n"
            "  compactor -config FILE [-check-config] run the compactor (merge levels, retention,\n"
            "                                          deletion of marked blocks)\n"
            "  -check-config                           validate FILE for that service (bounds,\n"
            "                                          cross-section rules, the bucket section)\n"
            "                                          and start nothing\n"
#ifdef STRATA_WITH_AGENT
            "  agent -remote-store HOST:PORT [...]    profile every process on this node with\n"
            "                                          eBPF and push (root; see docs/agent.md)\n"
#endif
            "\n"
            "tools:\n"
            "  push FILE... --name NAME [--label K=V]... [--address HOST:PORT] [--tenant T]\n"
            "                                          push pprof files through WriteRaw\n"
            "  push, query: [--tls] [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]\n"
            "               [--tls-server-name NAME] [--bearer-token-file FILE]\n"
            "                                          TLS (--tls: system CAs) and a bearer token\n"
            "  query types|labels|values|range|merge|diff ...\n"
            "                                          query a querier over gRPC (see\n"
            "                                          `strata query` for the flags)\n"
            "  block dump PATH [--top N]               print a block (a directory holding\n"
            "                                          meta.json and profiles.strata)\n"
            "  bucket ls|verify|rm-block -config FILE  list, check or delete the blocks in the\n"
            "                                          bucket (see `strata bucket`)\n"
            "  version                                 print the version\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "all") == 0 || strcmp(cmd, "ingester") == 0 || strcmp(cmd, "querier") == 0 ||
        strcmp(cmd, "scraper") == 0 || strcmp(cmd, "compactor") == 0)
        return cli_run_services(cmd, argc - 2, argv + 2);
#ifdef STRATA_WITH_AGENT
    if (strcmp(cmd, "agent") == 0)
        return agent_cli_main(argc - 1, argv + 1);
#endif
    if (strcmp(cmd, "push") == 0)
        return cli_push(argc - 2, argv + 2);
    if (strcmp(cmd, "query") == 0)
        return cli_query(argc - 2, argv + 2);
    if (strcmp(cmd, "block") == 0)
        return cli_block(argc - 2, argv + 2);
    if (strcmp(cmd, "bucket") == 0)
        return cli_bucket(argc - 2, argv + 2);
    if (strcmp(cmd, "version") == 0 || cli_flag_is(cmd, "version")) {
        printf("strata %s\n", STRATA_VERSION);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || cli_flag_is(cmd, "help") || cli_flag_is(cmd, "h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "strata: unknown command \"%s\"\n\n", cmd);
    usage(stderr);
    return 2;
}
