/*
 * rpc_common.c - see rpc_internal.h.
 */
#include "rpc/rpc_internal.h"

#include <limits.h>

#include "rpc/rpc.h"

static int message_limit(size_t bytes) {
    if (bytes == 0)
        bytes = RPC_DEFAULT_MAX_MESSAGE_BYTES;
    return bytes > (size_t)INT_MAX ? INT_MAX : (int)bytes;
}

void rpc_message_size_args(grpc_arg args[2], size_t max_receive, size_t max_send) {
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = message_limit(max_receive);
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = message_limit(max_send);
}

gpr_timespec rpc_deadline_after(int64_t timeout_ns) {
    if (timeout_ns <= 0)
        return gpr_inf_future(GPR_CLOCK_MONOTONIC);
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                        gpr_time_from_nanos(timeout_ns, GPR_TIMESPAN));
}

strata_status rpc_status_from_grpc(grpc_status_code code) {
    if ((int)code < 0 || (int)code >= RPC_STATUS_COUNT)
        return STRATA_UNKNOWN;
    return (strata_status)code;
}
