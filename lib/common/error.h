/*
 * error.h - errors carried as values.
 *
 * Every fallible function in Strata returns an int (0 on success, -1 on failure) and takes a
 * `strata_error *` that it fills on failure with a status code and a one-line message. The codes
 * are gRPC's canonical status codes, so a library error can travel unchanged to a gRPC client or be
 * mapped to an HTTP status, and the message says what went wrong in words a user can act on.
 * Libraries never print; the service at the top decides whether to log, return or retry.
 *
 * A NULL `strata_error *` is allowed everywhere: the caller then only learns "it failed".
 */
#ifndef STRATA_COMMON_ERROR_H
#define STRATA_COMMON_ERROR_H

#include <stddef.h>

typedef enum strata_status {
    STRATA_OK = 0,
    STRATA_CANCELLED = 1,
    STRATA_UNKNOWN = 2,
    STRATA_INVALID_ARGUMENT = 3,
    STRATA_DEADLINE_EXCEEDED = 4,
    STRATA_NOT_FOUND = 5,
    STRATA_ALREADY_EXISTS = 6,
    STRATA_PERMISSION_DENIED = 7,
    STRATA_RESOURCE_EXHAUSTED = 8,
    STRATA_FAILED_PRECONDITION = 9,
    STRATA_ABORTED = 10,
    STRATA_OUT_OF_RANGE = 11,
    STRATA_UNIMPLEMENTED = 12,
    STRATA_INTERNAL = 13,
    STRATA_UNAVAILABLE = 14,
    STRATA_DATA_LOSS = 15,
    STRATA_UNAUTHENTICATED = 16,
} strata_status;

#define STRATA_ERROR_MESSAGE_MAX 512

typedef struct strata_error {
    strata_status code;
    char message[STRATA_ERROR_MESSAGE_MAX];
} strata_error;

/* Resets err to STRATA_OK with an empty message. */
void strata_error_clear(strata_error *err);

/* Sets code and a printf-formatted message; always returns -1 so callers can `return
 * strata_error_set(...)`. The message is truncated to fit. */
int strata_error_set(strata_error *err, strata_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "context: " to an existing message (for example a file name or a key), keeping the code.
 * Returns -1. */
int strata_error_wrap(strata_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Name of a status code as gRPC spells it ("INVALID_ARGUMENT"). */
const char *strata_status_name(strata_status code);

/* Shorthand for the most common failure: an allocation that returned NULL. Returns -1. */
int strata_error_oom(strata_error *err);

#endif
