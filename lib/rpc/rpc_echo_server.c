/*
 * rpc_echo_server.c - serves the test services (rpc_test_services.h) for the Python interop test.
 *
 * Usage: rpc_echo_server [listen-address]   (default 127.0.0.1:0)
 * Prints "PORT <n>" on stdout once serving, then serves until stdin reaches end of file, shuts down
 * with a one second grace period and exits 0.
 */
#include <stdio.h>
#include <unistd.h>

#include "common/clock.h"
#include "rpc/rpc.h"
#include "rpc/rpc_test_services.h"

static int serve(const char *address) {
    strata_error err;
    test_delayer delayer;
    if (test_delayer_start(&delayer) != 0) {
        fprintf(stderr, "rpc_echo_server: cannot start delayer thread\n");
        return 1;
    }
    rpc_server_options options = {.listen_address = address, .threads = 2};
    rpc_server *server = rpc_server_new(&options, &err);
    int rc = server != NULL ? 0 : -1;
    if (rc == 0)
        rc = test_register_services(server, &delayer, &err);
    if (rc == 0)
        rc = rpc_server_start(server, &err);
    if (rc == 0) {
        printf("PORT %d\n", rpc_server_port(server));
        fflush(stdout);
        char buf[256];
        while (read(STDIN_FILENO, buf, sizeof(buf)) > 0) {
        }
    } else {
        fprintf(stderr, "rpc_echo_server: %s: %s\n", strata_status_name(err.code), err.message);
    }
    rpc_server_shutdown(server, STRATA_NS_PER_SEC);
    test_delayer_stop(&delayer);
    return rc == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    return serve(argc > 1 ? argv[1] : "127.0.0.1:0");
}
