/*
 * config_time.c - the time syntax users type: Unix milliseconds, RFC 3339 and now-<duration>
 * (config_parse_time in config.h). It lives beside the duration parser it builds on; the query
 * API's URL parameters and the command-line client both read times with it.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "config/config.h"

static int parse_rfc3339(const char *text, int64_t *out_ns) {
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *rest = strptime(text, "%Y-%m-%dT%H:%M:%S", &tm);
    if (rest == NULL)
        return -1;
    int64_t frac_ns = 0;
    if (*rest == '.') {
        int64_t scale = 100000000;
        for (rest++; *rest >= '0' && *rest <= '9'; rest++, scale /= 10)
            frac_ns += (*rest - '0') * scale;
    }
    int64_t offset_s = 0;
    if (*rest == 'Z') {
        rest++;
    } else if (*rest == '+' || *rest == '-') {
        /* Exactly [+-]HH:MM. */
        const char *o = rest + 1;
        if (!isdigit((unsigned char)o[0]) || !isdigit((unsigned char)o[1]) || o[2] != ':' ||
            !isdigit((unsigned char)o[3]) || !isdigit((unsigned char)o[4]))
            return -1;
        int hh = (o[0] - '0') * 10 + (o[1] - '0'), mm = (o[3] - '0') * 10 + (o[4] - '0');
        if (hh > 23 || mm > 59)
            return -1;
        offset_s = (hh * 3600 + mm * 60) * (*rest == '+' ? 1 : -1);
        rest += 6;
    } else {
        return -1;
    }
    if (*rest != '\0')
        return -1;
    int64_t secs = (int64_t)timegm(&tm) - offset_s;
    /* Times are int64 nanoseconds: years about 1678 to 2262. */
    if (secs > INT64_MAX / STRATA_NS_PER_SEC - 1 || secs < INT64_MIN / STRATA_NS_PER_SEC + 1)
        return -1;
    *out_ns = secs * STRATA_NS_PER_SEC + frac_ns;
    return 0;
}

int config_parse_time(const char *name, const char *text, int64_t now_ns, int64_t *out,
                      strata_error *err) {
    if (strcmp(text, "now") == 0) {
        *out = now_ns;
        return 0;
    }
    if (strncmp(text, "now-", 4) == 0) {
        int64_t d;
        if (!config_parse_duration(text + 4, &d))
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "%s: \"%s\" is not now-<duration> like now-1h", name, text);
        if (d < 0 || now_ns < INT64_MIN + d)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: \"%s\" is out of range",
                                    name, text);
        *out = now_ns - d;
        return 0;
    }
    int64_t ms;
    if (config_parse_int64(text, &ms)) {
        if (ms > INT64_MAX / STRATA_NS_PER_MS || ms < INT64_MIN / STRATA_NS_PER_MS)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "%s: %s ms is out of range (years 1678 to 2262)", name, text);
        *out = ms * STRATA_NS_PER_MS;
        return 0;
    }
    if (parse_rfc3339(text, out) == 0)
        return 0;
    return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                            "%s: \"%s\" is not a time (Unix milliseconds, RFC 3339, now or now-1h)",
                            name, text);
}
