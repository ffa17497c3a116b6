/*
 * regex_internal.h - what regex.cc (the RE2 shim) and regex.c (messages, templates) share; not
 * part of the module's contract.
 */
#ifndef STRATA_REGEX_REGEX_INTERNAL_H
#define STRATA_REGEX_REGEX_INTERNAL_H

#include "common/error.h"
#include "regex/regex.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sets err to `invalid regular expression "PATTERN": REASON` with code, the pattern quoted and
 * both shortened and escaped (control bytes and bytes that are not UTF-8 as \xNN) so the message
 * is one printable line. Returns -1. */
int regex_error(strata_error *err, strata_status code, const char *pattern, const char *reason);

#ifdef __cplusplus
}
#endif

#endif
