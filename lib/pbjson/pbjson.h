/*
 * pbjson.h - the proto3 JSON mapping (protojson) of protobuf-c messages, driven by their
 * descriptors: what Connect's JSON codec carries (lib/rpcweb).
 *
 * Encoding writes lowerCamelCase names, omits fields at their default (proto3 implicit presence)
 * but writes set oneof members (proto3 `optional` included) and non-empty repeated fields; 64-bit
 * integers as strings, enums by name, bytes in base64, google.protobuf.Timestamp as RFC 3339 and
 * Duration as "1.5s". Decoding accepts the lowerCamelCase and the original names, numbers or
 * strings for integers, names or numbers for enums, null as the default, and refuses unknown
 * fields, wrong types and out-of-range numbers (INVALID_ARGUMENT naming the field). Maps are
 * written and read as arrays of their entries, as protobuf-c represents them.
 */
#ifndef STRATA_PBJSON_H
#define STRATA_PBJSON_H

#include <protobuf-c/protobuf-c.h>

#include "common/buffer.h"
#include "common/error.h"

/* The JSON of the packed message binary[0..len) of type d, appended to out. */
int pbjson_encode(const ProtobufCMessageDescriptor *d, const uint8_t *binary, size_t len,
                  strata_buffer *out, strata_error *err);
/* The packed message of type d that JSON text[0..len) describes, appended to out. */
int pbjson_decode(const ProtobufCMessageDescriptor *d, const char *text, size_t len,
                  strata_buffer *out, strata_error *err);

#endif
