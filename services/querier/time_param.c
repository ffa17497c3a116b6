/*
 * time_param.c - see time_param.h.
 */
#include "time_param.h"

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
        int hh, mm;
        if (sscanf(rest + 1, "%2d:%2d", &hh, &mm) != 2)
            return -1;
        offset_s = (hh * 3600 + mm * 60) * (*rest == '+' ? 1 : -1);
        rest += 6;
    } else {
        return -1;
    }
    if (*rest != '\0')
        return -1;
    *out_ns = ((int64_t)timegm(&tm) - offset_s) * STRATA_NS_PER_SEC + frac_ns;
    return 0;
}

int query_parse_time(const char *name, const char *text, int64_t now_ns, int64_t *out,
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
        *out = now_ns - d;
        return 0;
    }
    int64_t ms;
    if (config_parse_int64(text, &ms)) {
        *out = ms * STRATA_NS_PER_MS;
        return 0;
    }
    if (parse_rfc3339(text, out) == 0)
        return 0;
    return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                            "%s: \"%s\" is not a time (Unix milliseconds, RFC 3339, now or now-1h)",
                            name, text);
}
