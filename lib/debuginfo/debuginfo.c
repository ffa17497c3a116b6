/*
 * debuginfo.c - build ids and bucket keys of uploaded sources (debuginfo.h).
 *
 * A build id becomes a path segment (or two, for Go's "<action>/<content>") of a bucket key, so
 * it is held to a small alphabet and may not climb out of its directory.
 */
#include <stdio.h>
#include <string.h>

#include "debuginfo/debuginfo.h"

static bool build_id_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-' || c == '/';
}

int debuginfo_check_build_id(const char *id, strata_error *err) {
    size_t len = id != NULL ? strlen(id) : 0;
    if (len == 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "build_id is empty");
    if (len > DEBUGINFO_MAX_BUILD_ID)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "build_id has %zu characters: at most %d", len,
                                DEBUGINFO_MAX_BUILD_ID);
    for (size_t i = 0; i < len; i++)
        if (!build_id_char(id[i]))
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "build_id has a character outside [A-Za-z0-9._/-] at %zu", i);
    for (const char *seg = id;;) {
        const char *slash = strchr(seg, '/');
        size_t n = slash != NULL ? (size_t)(slash - seg) : strlen(seg);
        if (n == 0 || (n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "build_id has an empty, \".\" or \"..\" segment");
        if (slash == NULL)
            return 0;
        seg = slash + 1;
    }
}

int debuginfo_sources_key(const char *tenant, const char *build_id, char *out, size_t size,
                          strata_error *err) {
    int n = snprintf(out, size, "%s/debuginfo/%s/sources", tenant, build_id);
    if (n < 0 || (size_t)n >= size)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "the sources key is too long");
    return 0;
}
