/*
 * textfile.c - see textfile.h.
 */
#include "common/textfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static strata_status status_from_errno(int e) {
    if (e == ENOENT || e == ENOTDIR)
        return STRATA_NOT_FOUND;
    if (e == EACCES || e == EPERM)
        return STRATA_PERMISSION_DENIED;
    return STRATA_INTERNAL;
}

int strata_textfile_read(const char *path, const char *what, char **out, size_t *len,
                         strata_error *err) {
    *out = NULL;
    if (len != NULL)
        *len = 0;
    if (path == NULL || path[0] == '\0')
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: no file named", what);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        int e = errno;
        return strata_error_set(err, status_from_errno(e), "%s: %s: %s", what, path, strerror(e));
    }
    char *data = malloc(STRATA_TEXTFILE_MAX_BYTES + 1);
    if (data == NULL) {
        fclose(f);
        return strata_error_oom(err);
    }
    size_t n = fread(data, 1, STRATA_TEXTFILE_MAX_BYTES + 1, f);
    int failed = ferror(f);
    int e = errno;
    fclose(f);
    int rc = 0;
    if (failed)
        rc = strata_error_set(err, status_from_errno(e), "%s: %s: %s", what, path, strerror(e));
    else if (n > STRATA_TEXTFILE_MAX_BYTES)
        rc = strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: %s: larger than %zu bytes", what,
                              path, STRATA_TEXTFILE_MAX_BYTES);
    else if (n == 0)
        rc = strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: %s: empty", what, path);
    else if (memchr(data, '\0', n) != NULL)
        rc = strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: %s: holds a NUL byte", what, path);
    if (rc != 0) {
        free(data);
        return rc;
    }
    data[n] = '\0';
    char *shrunk = realloc(data, n + 1);
    *out = shrunk != NULL ? shrunk : data;
    if (len != NULL)
        *len = n;
    return 0;
}
