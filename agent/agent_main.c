/*
 * agent_main.c - the standalone `strata-agent` binary; `strata agent` calls the same entry.
 */
#include "agent_cli.h"

int main(int argc, char **argv) {
    return agent_cli_main(argc, argv);
}
