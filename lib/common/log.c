/*
 * log.c - see log.h. The line is formatted into a stack buffer and written with one write(2).
 */
#include "common/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static atomic_int log_level = -1;
static atomic_int log_fd = 2;

int strata_log_parse_level(const char *name, strata_log_level *out) {
    static const char *const names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(name, names[i]) == 0) {
            *out = (strata_log_level)i;
            return 0;
        }
    }
    return -1;
}

void strata_log_set_level(strata_log_level level) {
    atomic_store(&log_level, (int)level);
}

void strata_log_set_fd(int fd) {
    atomic_store(&log_fd, fd);
}

static int current_level(void) {
    int level = atomic_load(&log_level);
    if (level >= 0)
        return level;
    strata_log_level parsed = STRATA_LOG_INFO;
    const char *env = getenv("STRATA_LOG_LEVEL");
    if (env != NULL && strata_log_parse_level(env, &parsed) != 0)
        parsed = STRATA_LOG_INFO;
    atomic_store(&log_level, (int)parsed);
    return (int)parsed;
}

const char *strata_log_quote(const char *s, char *out, size_t out_len) {
    size_t o = 0;
    if (out_len < 3) {
        if (out_len > 0)
            out[0] = '\0';
        return out;
    }
    out[o++] = '"';
    for (; *s != '\0' && o + 3 < out_len; s++) {
        char c = *s;
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = c;
        } else if (c == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else if ((unsigned char)c < 0x20) {
            out[o++] = ' ';
        } else {
            out[o++] = c;
        }
    }
    out[o++] = '"';
    out[o] = '\0';
    return out;
}

void strata_log(strata_log_level level, const char *component, const char *msg,
                const char *fields_fmt, ...) {
    static const char *const names[] = {"debug", "info", "warn", "error"};
    if ((int)level < current_level())
        return;
    char line[4096];
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct tm tm;
    gmtime_r(&now.tv_sec, &tm);
    char quoted[1024];
    int n = snprintf(line, sizeof line,
                     "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s component=%s msg=%s",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     now.tv_nsec / 1000000, names[level], component,
                     strata_log_quote(msg, quoted, sizeof quoted));
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    if (fields_fmt != NULL && fields_fmt[0] != '\0' && len + 2 < sizeof line) {
        line[len++] = ' ';
        va_list ap;
        va_start(ap, fields_fmt);
        int m = vsnprintf(line + len, sizeof line - len, fields_fmt, ap);
        va_end(ap);
        if (m > 0)
            len += (size_t)m < sizeof line - len ? (size_t)m : sizeof line - len - 1;
    }
    if (len + 1 >= sizeof line)
        len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t ignored = write(atomic_load(&log_fd), line, len);
    (void)ignored;
}
