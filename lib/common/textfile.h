/*
 * textfile.h - reads a small text file (a PEM certificate or key, a bearer token) whole, as a
 * NUL-terminated string, for the TLS and authentication settings of the servers and clients.
 */
#ifndef STRATA_COMMON_TEXTFILE_H
#define STRATA_COMMON_TEXTFILE_H

#include <stddef.h>

#include "common/error.h"

/* The largest file read: certificate chains and keys are a few KiB. */
#define STRATA_TEXTFILE_MAX_BYTES ((size_t)1 << 20)

/* Reads path into a malloc'd NUL-terminated string (*out, length in *len when len is not NULL).
 * `what` names the setting in messages ("server.tls.cert_file"). Errors: NOT_FOUND or
 * PERMISSION_DENIED or INTERNAL (errno's text), INVALID_ARGUMENT for an empty file, a file with a
 * NUL byte or over STRATA_TEXTFILE_MAX_BYTES, RESOURCE_EXHAUSTED. */
int strata_textfile_read(const char *path, const char *what, char **out, size_t *len,
                         strata_error *err);

#endif
