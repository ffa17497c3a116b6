/*
 * random_id.c - 128-bit random ids as hex (random_id.h).
 */
#include <stdint.h>
#include <stdio.h>
#include <sys/random.h>

#include "common/random_id.h"

int strata_random_id(char *out, strata_error *err) {
    uint8_t raw[STRATA_RANDOM_ID_LEN / 2];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        return strata_error_set(err, STRATA_UNAVAILABLE, "getrandom failed");
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
    return 0;
}
