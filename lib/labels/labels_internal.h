/*
 * labels_internal.h - helpers shared by the files of the labels module; not part of its contract.
 */
#ifndef STRATA_LABELS_INTERNAL_H
#define STRATA_LABELS_INTERNAL_H

#include <stddef.h>

#include "common/buffer.h"
#include "common/error.h"
#include "labels/labels.h"

/* Appends s as a double-quoted string that selector_parse reads back to the same bytes: \" \\ \n
 * \t \r, other control bytes and bytes that are not valid UTF-8 as \xNN, the rest verbatim. */
int labels_append_quoted(strata_buffer *out, const char *s);

/* Writes s quoted as above into out (truncated with "..." to fit) for error messages. */
const char *labels_quote_for_message(const char *s, char *out, size_t out_len);

/* Parses a profile type; `column` is the 1-based column of text[0], used in error messages. */
int labels_parse_profile_type(const char *text, size_t len, size_t column, profile_type *out,
                              strata_error *err);

#endif
