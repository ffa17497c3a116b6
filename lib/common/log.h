/*
 * log.h - structured one-line logs (logfmt), the only place Strata writes diagnostics.
 *
 *   ts=2026-12-02T12:00:00.123Z level=info component=ingester msg="block written" ulid=01H...
 * bytes=1234
 *
 * Each call writes exactly one line with a single write(2), so lines from concurrent threads never
 * interleave. Key/value pairs are given as a printf format; use strata_log_quote() for values that
 * may contain spaces or quotes. Only services log; libraries return errors (see error.h).
 */
#ifndef STRATA_COMMON_LOG_H
#define STRATA_COMMON_LOG_H

#include <stddef.h>

typedef enum strata_log_level {
    STRATA_LOG_DEBUG = 0,
    STRATA_LOG_INFO = 1,
    STRATA_LOG_WARN = 2,
    STRATA_LOG_ERROR = 3,
} strata_log_level;

/* Minimum level written (default info); also set by STRATA_LOG_LEVEL=debug|info|warn|error. */
void strata_log_set_level(strata_log_level level);
/* Parses "debug", "info", "warn" or "error"; returns -1 for anything else. */
int strata_log_parse_level(const char *name, strata_log_level *out);
/* Redirects output (default stderr). */
void strata_log_set_fd(int fd);

/* Writes `ts=... level=... component=... msg="..."` followed by the formatted fields. */
void strata_log(strata_log_level level, const char *component, const char *msg,
                const char *fields_fmt, ...) __attribute__((format(printf, 4, 5)));

/* Quotes s for logfmt into out (always NUL-terminated, truncated to fit): `"a \"b\""`. */
const char *strata_log_quote(const char *s, char *out, size_t out_len);

#define strata_log_info(component, msg, ...)                                                       \
    strata_log(STRATA_LOG_INFO, component, msg, __VA_ARGS__)
#define strata_log_warn(component, msg, ...)                                                       \
    strata_log(STRATA_LOG_WARN, component, msg, __VA_ARGS__)
#define strata_log_error(component, msg, ...)                                                      \
    strata_log(STRATA_LOG_ERROR, component, msg, __VA_ARGS__)
#define strata_log_debug(component, msg, ...)                                                      \
    strata_log(STRATA_LOG_DEBUG, component, msg, __VA_ARGS__)

#endif
