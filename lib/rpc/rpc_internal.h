/*
 * rpc_internal.h - helpers shared by the server and client halves of the rpc module (not part of
 * the contract).
 */
#ifndef STRATA_RPC_RPC_INTERNAL_H
#define STRATA_RPC_RPC_INTERNAL_H

#include <grpc/grpc.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* Fills args[0..1] with grpc's message size limits (0 means the 64 MiB default). The keys are
 * static strings, so the args need no cleanup. */
void rpc_message_size_args(grpc_arg args[2], size_t max_receive, size_t max_send);

/* Absolute monotonic deadline timeout_ns from now; infinite for timeout_ns <= 0. */
gpr_timespec rpc_deadline_after(int64_t timeout_ns);

/* Maps a grpc status code to strata_status (out-of-range codes become UNKNOWN). */
strata_status rpc_status_from_grpc(grpc_status_code code);

#endif
