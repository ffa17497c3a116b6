/*
 * config_values.c - parsers for scalar config values (see config.h for the accepted forms).
 *
 * All parsers work on the whole NUL-terminated text, accept no surrounding spaces and check every
 * step for overflow, so an out-of-range value is rejected rather than wrapped.
 */
#include "config/config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"

bool config_parse_bool(const char *text, bool *out) {
    static const char *const truths[] = {"true", "True", "TRUE"};
    static const char *const lies[] = {"false", "False", "FALSE"};
    for (size_t i = 0; i < 3; i++) {
        if (strcmp(text, truths[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcmp(text, lies[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

static int digit_value(char c, unsigned base) {
    int v;
    if (c >= '0' && c <= '9')
        v = c - '0';
    else if (c >= 'a' && c <= 'f')
        v = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
        v = c - 'A' + 10;
    else
        return -1;
    return (unsigned)v < base ? v : -1;
}

/* Parses unsigned decimal or 0x hex digits making up all of text; false on overflow. */
static bool parse_magnitude(const char *text, uint64_t *out) {
    unsigned base = 10;
    if (text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
        base = 16;
        text += 2;
    }
    if (*text == '\0')
        return false;
    uint64_t v = 0;
    for (; *text != '\0'; text++) {
        int d = digit_value(*text, base);
        if (d < 0 || v > (UINT64_MAX - (uint64_t)d) / base)
            return false;
        v = v * base + (uint64_t)d;
    }
    *out = v;
    return true;
}

bool config_parse_uint64(const char *text, uint64_t *out) {
    if (*text == '+')
        text++;
    return parse_magnitude(text, out);
}

bool config_parse_int64(const char *text, int64_t *out) {
    bool negative = *text == '-';
    if (*text == '-' || *text == '+')
        text++;
    uint64_t m;
    if (!parse_magnitude(text, &m))
        return false;
    if (negative) {
        if (m > (uint64_t)INT64_MAX + 1)
            return false;
        *out = m == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)m;
    } else {
        if (m > (uint64_t)INT64_MAX)
            return false;
        *out = (int64_t)m;
    }
    return true;
}

bool config_parse_double(const char *text, double *out) {
    /* Only plain decimal notation: strtod would also take "inf", "nan" and hex floats. */
    if (*text == '\0' || strspn(text, "0123456789+-.eE") != strlen(text))
        return false;
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (*end != '\0' || end == text || !isfinite(v) || (errno == ERANGE && fabs(v) > 1.0))
        return false;
    *out = v;
    return true;
}

typedef struct unit {
    const char *name;
    uint64_t scale;
} unit;

/* Reads "digits[.digits]" at *p and multiplies by the unit found right after it (from units,
 * longest names first). Adds the product to *total. */
static bool parse_component(const char **p, const unit *units, size_t n_units, size_t *unit_index,
                            uint64_t *total) {
    const char *s = *p;
    uint64_t whole = 0;
    const char *digits = s;
    while (*s >= '0' && *s <= '9') {
        uint64_t d = (uint64_t)(*s++ - '0');
        if (whole > (UINT64_MAX - d) / 10)
            return false;
        whole = whole * 10 + d;
    }
    const char *frac = NULL;
    size_t frac_len = 0;
    if (*s == '.') {
        frac = ++s;
        while (*s >= '0' && *s <= '9')
            s++;
        frac_len = (size_t)(s - frac);
    }
    if (s == digits || (frac != NULL && frac_len == 0))
        return false;
    size_t u = 0;
    for (; u < n_units; u++)
        if (strncmp(s, units[u].name, strlen(units[u].name)) == 0)
            break;
    if (u == n_units)
        return false;
    uint64_t scale = units[u].scale;
    if (frac_len > 0 && scale == 1)
        return false; /* "1.5ns", "1.5B": nothing smaller to express the fraction in */
    if (whole != 0 && scale > UINT64_MAX / whole)
        return false;
    uint64_t value = whole * scale;
    /* floor(0.d1d2..dk * scale), exactly: Horner's rule from the last digit, each step floored.
     * fraction < scale <= 2^60, so d * scale + fraction <= 10 * scale fits. */
    uint64_t fraction = 0;
    for (size_t i = frac_len; i-- > 0;)
        fraction = ((uint64_t)(frac[i] - '0') * scale + fraction) / 10;
    if (value > UINT64_MAX - fraction)
        return false;
    value += fraction;
    if (*total > UINT64_MAX - value)
        return false;
    *total += value;
    *unit_index = u;
    *p = s + strlen(units[u].name);
    return true;
}

/* Units for durations, largest first; within equal prefixes the longer name comes first. The
 * order index also enforces "largest unit first, each once". */
static const unit duration_units[] = {
    {"y", UINT64_C(365) * 24 * 3600 * 1000000000},
    {"w", UINT64_C(7) * 24 * 3600 * 1000000000},
    {"d", UINT64_C(24) * 3600 * 1000000000},
    {"h", UINT64_C(3600) * 1000000000},
    {"ms", UINT64_C(1000000)},
    {"m", UINT64_C(60) * 1000000000},
    {"s", UINT64_C(1000000000)},
    {"us", UINT64_C(1000)},
    {"\xc2\xb5s", UINT64_C(1000)},
    {"ns", UINT64_C(1)},
};

/* Rank of a unit for ordering ("ms" sits after "m" and "s" though listed before "m"). */
static int duration_rank(size_t index) {
    static const int ranks[] = {0, 1, 2, 3, 6, 4, 5, 7, 7, 8};
    return ranks[index];
}

bool config_parse_duration(const char *text, int64_t *out_ns) {
    if (strcmp(text, "0") == 0) {
        *out_ns = 0;
        return true;
    }
    if (*text == '\0')
        return false;
    uint64_t total = 0;
    int last_rank = -1;
    const char *p = text;
    while (*p != '\0') {
        size_t u;
        if (!parse_component(&p, duration_units, sizeof duration_units / sizeof duration_units[0],
                             &u, &total))
            return false;
        if (duration_rank(u) <= last_rank)
            return false;
        last_rank = duration_rank(u);
    }
    if (total > (uint64_t)INT64_MAX)
        return false;
    *out_ns = (int64_t)total;
    return true;
}

static const unit byte_units[] = {
    {"KiB", UINT64_C(1) << 10},
    {"MiB", UINT64_C(1) << 20},
    {"GiB", UINT64_C(1) << 30},
    {"TiB", UINT64_C(1) << 40},
    {"PiB", UINT64_C(1) << 50},
    {"EiB", UINT64_C(1) << 60},
    {"KB", UINT64_C(1) << 10},
    {"MB", UINT64_C(1) << 20},
    {"GB", UINT64_C(1) << 30},
    {"TB", UINT64_C(1) << 40},
    {"PB", UINT64_C(1) << 50},
    {"EB", UINT64_C(1) << 60},
    {"B", 1},
    {"", 1},
};

bool config_parse_bytes(const char *text, uint64_t *out) {
    const char *p = text;
    uint64_t total = 0;
    size_t u;
    if (!parse_component(&p, byte_units, sizeof byte_units / sizeof byte_units[0], &u, &total))
        return false;
    if (*p != '\0')
        return false;
    *out = total;
    return true;
}
