/*
 * utf8.h - the one UTF-8 validator, and the rule for every string Strata accepts from outside.
 *
 * Valid UTF-8 is RFC 3629's: no overlong forms, no surrogates (U+D800-U+DFFF), nothing above
 * U+10FFFF, no truncated or stray continuation bytes. It is what Go's and Python's protobuf
 * libraries demand of every proto3 `string` they decode, so a string that is not valid UTF-8,
 * once stored, makes every answer that carries it undecodable for Parca's clients.
 *
 * A string fit to store (strata_utf8_check_text) is valid UTF-8 without a NUL byte: NUL is valid
 * UTF-8, but Strata's C code reads stored strings as NUL-terminated, so `job="victim\0evil"` would
 * silently become `job="victim"`. The ingester checks every label and every pprof string with it;
 * the JSON reader and the label quoting use strata_utf8_sequence_length, and producers of text
 * that may not be UTF-8 (process names, symbols) repair it with strata_utf8_append_sanitized.
 *
 * Pure ASCII (the common case: label values, Go symbol names) is checked eight bytes at a time.
 */
#ifndef STRATA_COMMON_UTF8_H
#define STRATA_COMMON_UTF8_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buffer.h"
#include "common/error.h"

/* Length (1-4) of the valid UTF-8 sequence starting at s, with len >= 1 bytes available, or 0 if
 * the bytes there are not valid UTF-8. NUL is a valid one-byte sequence. */
size_t strata_utf8_sequence_length(const unsigned char *s, size_t len);

/* Offset of the first byte of s[0, len) that does not start a valid sequence; len when all of s is
 * valid UTF-8. */
size_t strata_utf8_valid_prefix(const char *s, size_t len);

/* True when s[0, len) is valid UTF-8 (NUL bytes allowed). */
bool strata_utf8_is_valid(const char *s, size_t len);

/* Checks that s[0, len) is fit to store: valid UTF-8 and no NUL byte. On failure sets
 * INVALID_ARGUMENT with "invalid UTF-8 at offset N" or "NUL byte at offset N" (N counted in bytes
 * from 0, the first problem in the string) for the caller to prefix with the field's name, and
 * returns -1. */
int strata_utf8_check_text(const char *s, size_t len, strata_error *err);

/* Appends s[0, len) to out made fit to store: each NUL byte, and each byte that does not start a
 * valid sequence, becomes U+FFFD (as Go's strings.ToValidUTF8 does per invalid run, but per byte).
 * For producers of strings Strata did not write, such as process names cut at 15 bytes in the
 * middle of a character, or symbol names from arbitrary binaries. Returns -1 when out of memory
 * (out then holds a prefix). */
int strata_utf8_append_sanitized(strata_buffer *out, const char *s, size_t len);

#endif
