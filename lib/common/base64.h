/*
 * base64.h - RFC 4648 base64 (the standard alphabet), for the text forms of binary data that
 * Strata reads and writes: Kubernetes kubeconfig certificates, gRPC-Web's text encoding.
 *
 * Decoding is strict about the alphabet and lenient about layout: whitespace is skipped and the
 * '=' padding is optional, but nothing may follow padding and a lone trailing character (six bits,
 * no byte) is an error.
 */
#ifndef STRATA_COMMON_BASE64_H
#define STRATA_COMMON_BASE64_H

#include <stddef.h>

#include "common/buffer.h"
#include "common/error.h"

/* Appends base64 of data, padded; -1 when out of memory. */
int strata_base64_encode(strata_buffer *out, const void *data, size_t len);
/* Appends the bytes text[0..len) encodes; -1 with INVALID_ARGUMENT when it is not base64. */
int strata_base64_decode(const char *text, size_t len, strata_buffer *out, strata_error *err);

#endif
