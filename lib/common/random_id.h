/*
 * random_id.h - unguessable identifiers: 128 bits from getrandom(2) as 32 lowercase hex digits,
 * for names clients hold (an upload id, a shared profile's link) where guessing one must be as
 * hard as guessing a key.
 */
#ifndef STRATA_COMMON_RANDOM_ID_H
#define STRATA_COMMON_RANDOM_ID_H

#include "common/error.h"

#define STRATA_RANDOM_ID_LEN 32

/* Writes a fresh id and its NUL into out (STRATA_RANDOM_ID_LEN + 1 bytes). UNAVAILABLE when the
 * kernel's random source fails: no weaker fallback. */
int strata_random_id(char *out, strata_error *err);

#endif
