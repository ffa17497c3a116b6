/*
 * debuginfo.h - uploaded source archives: where they live in the bucket, which build ids are
 * accepted, and how a file is found in one.
 *
 * Parca's users upload the sources of a build (`parca-debuginfo source` then `upload`, through
 * parca.debuginfo.v1alpha1.DebuginfoService) so that the SOURCE report can show a file's lines
 * beside the profile's values for them. The upload is a tar archive, gzip- or zstd-compressed,
 * whose entries are named by the paths the binary's debug information gives its sources (with or
 * without a leading "/" or "./"). Strata keeps it unchanged, per tenant, under
 *
 *     <tenant>/debuginfo/<build id>/sources
 *
 * which no block listing mistakes for a block (block directories are ULIDs). The ingester writes
 * it (services/ingester/debuginfo_service.c); the querier reads it for SOURCE
 * (source_archive_find).
 *
 * Reading an archive streams it: the compressed bytes are inflated a window at a time and the tar
 * entries walked without holding the uncompressed archive, so a large archive costs its
 * compressed size plus the one file wanted. Entries understood: regular files ('0' and the old
 * '\0'), GNU long names ('L') and pax extended headers ('x', their "path" record); other entry
 * types (directories, links, pax global headers) are skipped. Header checksums are verified. A
 * file over max_file_bytes, a damaged or truncated archive, or more than
 * SOURCE_ARCHIVE_MAX_EXPANDED_BYTES of tar stream is INVALID_ARGUMENT with the reason.
 */
#ifndef STRATA_DEBUGINFO_H
#define STRATA_DEBUGINFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buffer.h"
#include "common/error.h"

/* Longest build id accepted (GNU build ids are 40 hex digits, Go's are about 90 characters). */
#define DEBUGINFO_MAX_BUILD_ID 256
/* Most tar stream one archive may expand to (a guard against compression bombs). */
#define SOURCE_ARCHIVE_MAX_EXPANDED_BYTES ((uint64_t)8 << 30)
/* The largest file a SOURCE report reads, as Parca. */
#define SOURCE_ARCHIVE_MAX_FILE_BYTES ((size_t)100 << 20)

/* 0 when build_id is usable in a bucket key: 1..DEBUGINFO_MAX_BUILD_ID characters of
 * [A-Za-z0-9._-] and "/" (Go build ids are "<action id>/<content id>"), without an empty, "." or
 * ".." segment. Else INVALID_ARGUMENT saying why. */
int debuginfo_check_build_id(const char *build_id, strata_error *err);

/* The bucket key of a build's sources, into out (size bytes); the build id must have passed
 * debuginfo_check_build_id. INVALID_ARGUMENT when it does not fit. */
int debuginfo_sources_key(const char *tenant, const char *build_id, char *out, size_t size,
                          strata_error *err);

/* Walks every entry of the compressed archive data[0..len); INVALID_ARGUMENT when it is not a
 * gzip or zstd compressed tar or is damaged. *n_files (may be NULL) counts its regular files. */
int source_archive_check(const uint8_t *data, size_t len, size_t *n_files, strata_error *err);

/* Appends the contents of `filename` (compared without a leading "/" or "./") in the archive to
 * out. NOT_FOUND when the archive has no such file; INVALID_ARGUMENT for a damaged archive or a
 * file over max_file_bytes. */
int source_archive_find(const uint8_t *data, size_t len, const char *filename,
                        size_t max_file_bytes, strata_buffer *out, strata_error *err);

#endif
