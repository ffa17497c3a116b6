/*
 * error.c - see error.h. Formatting only; no allocation, so reporting an out-of-memory error
 * cannot itself fail.
 */
#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void strata_error_clear(strata_error *err) {
    if (err == NULL)
        return;
    err->code = STRATA_OK;
    err->message[0] = '\0';
}

int strata_error_set(strata_error *err, strata_status code, const char *fmt, ...) {
    if (err == NULL)
        return -1;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}

int strata_error_wrap(strata_error *err, const char *fmt, ...) {
    if (err == NULL)
        return -1;
    char prefix[STRATA_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    char joined[2 * STRATA_ERROR_MESSAGE_MAX + 2];
    size_t plen = strlen(prefix), mlen = strnlen(err->message, sizeof err->message);
    memcpy(joined, prefix, plen);
    memcpy(joined + plen, ": ", 2);
    memcpy(joined + plen + 2, err->message, mlen);
    size_t total = plen + 2 + mlen;
    if (total >= sizeof err->message)
        total = sizeof err->message - 1;
    memcpy(err->message, joined, total);
    err->message[total] = '\0';
    if (err->code == STRATA_OK)
        err->code = STRATA_UNKNOWN;
    return -1;
}

int strata_error_oom(strata_error *err) {
    return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED, "out of memory");
}

const char *strata_status_name(strata_status code) {
    static const char *const names[] = {
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    };
    if ((unsigned)code < sizeof names / sizeof names[0])
        return names[code];
    return "UNKNOWN";
}
