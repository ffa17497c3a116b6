/*
 * announce_internal.h - helpers shared by the files of lib/announce; not part of the contract.
 */
#ifndef STRATA_ANNOUNCE_INTERNAL_H
#define STRATA_ANNOUNCE_INTERNAL_H

#include <stddef.h>

#include "common/error.h"

/* Validates tenant and ulid and writes the version 1 message (no NUL counted) into out. */
int announce_format_message(const char *tenant, const char *ulid, char *out, size_t out_size,
                            size_t *len_out, strata_error *err);

/* Maps an nng error to a strata_error: "announce: <what> <url>: <nng message>". Returns -1. */
int announce_nng_error(strata_error *err, int rv, const char *what, const char *url);

#endif
