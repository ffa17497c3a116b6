/*
 * protobuf_writer.h - writing protobuf by hand: sizes first, then bytes through a cursor.
 *
 * Where an answer has hundreds of thousands of small messages (a pprof's samples, a range query's
 * points), building protobuf-c structs for each (and a Timestamp struct per point) costs more than
 * the query; these helpers write the wire format straight into room reserved once. Writers size
 * every message before writing it, so lengths are exact minimal varints. Scalar fields equal to
 * zero are omitted, as proto3 encoders do; messages are always written (an empty one as a key and
 * a zero length), as protobuf-c writes a set submessage.
 */
#ifndef STRATA_COMMON_PROTOBUF_WRITER_H
#define STRATA_COMMON_PROTOBUF_WRITER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/buffer.h"

enum { STRATA_PB_VARINT = 0, STRATA_PB_FIXED64 = 1, STRATA_PB_LEN = 2 };

static inline size_t strata_pb_varint_size(uint64_t v) {
    /* 7 bits per byte: ceil(significant bits / 7), at least one byte (no loop: encoders size
     * every field of large answers twice) */
    unsigned bits = 64u - (unsigned)__builtin_clzll(v | 1);
    return (bits + 6) / 7;
}

static inline size_t strata_pb_key_size(unsigned field) {
    return strata_pb_varint_size((uint64_t)field << 3);
}

static inline uint8_t *strata_pb_put_key(uint8_t *o, unsigned field, unsigned wire) {
    return o + strata_uvarint_put(o, (uint64_t)field << 3 | wire);
}

/* A varint field (int32/int64 values sign-extended, as protobuf does), omitted when zero. */
static inline size_t strata_pb_varint_field_size(unsigned field, uint64_t v) {
    return v == 0 ? 0 : strata_pb_key_size(field) + strata_pb_varint_size(v);
}

static inline uint8_t *strata_pb_put_varint_field(uint8_t *o, unsigned field, uint64_t v) {
    if (v == 0)
        return o;
    o = strata_pb_put_key(o, field, STRATA_PB_VARINT);
    return o + strata_uvarint_put(o, v);
}

/* A double field, omitted when zero. */
static inline size_t strata_pb_double_field_size(unsigned field, double v) {
    return v == 0 ? 0 : strata_pb_key_size(field) + 8;
}

static inline uint8_t *strata_pb_put_double_field(uint8_t *o, unsigned field, double v) {
    if (v == 0)
        return o;
    o = strata_pb_put_key(o, field, STRATA_PB_FIXED64);
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    for (int i = 0; i < 8; i++)
        *o++ = (uint8_t)(bits >> (8 * i));
    return o;
}

/* A length-delimited field (message, string, bytes, packed) of payload size len. */
static inline size_t strata_pb_len_field_size(unsigned field, size_t len) {
    return strata_pb_key_size(field) + strata_pb_varint_size(len) + len;
}

static inline uint8_t *strata_pb_put_len_key(uint8_t *o, unsigned field, size_t len) {
    o = strata_pb_put_key(o, field, STRATA_PB_LEN);
    return o + strata_uvarint_put(o, len);
}

/* A string field, omitted when empty (proto3). */
static inline size_t strata_pb_string_field_size(unsigned field, size_t len) {
    return len == 0 ? 0 : strata_pb_len_field_size(field, len);
}

static inline uint8_t *strata_pb_put_string_field(uint8_t *o, unsigned field, const char *s,
                                                  size_t len) {
    if (len == 0)
        return o;
    o = strata_pb_put_len_key(o, field, len);
    memcpy(o, s, len);
    return o + len;
}

/* Appending fields to a buffer, for small messages not worth sizing first. 0, or -1 when out of
 * memory (the buffer may then hold part of the field). A varint field is omitted when zero; a
 * length-delimited one is always written. */
static inline int strata_pb_append_varint_field(strata_buffer *b, unsigned field, uint64_t v) {
    if (v == 0)
        return 0;
    return strata_buffer_append_uvarint(b, (uint64_t)field << 3 | STRATA_PB_VARINT) != 0 ||
                   strata_buffer_append_uvarint(b, v) != 0
               ? -1
               : 0;
}

static inline int strata_pb_append_len_field(strata_buffer *b, unsigned field, const void *data,
                                             size_t len) {
    return strata_buffer_append_uvarint(b, (uint64_t)field << 3 | STRATA_PB_LEN) != 0 ||
                   strata_buffer_append_uvarint(b, len) != 0 ||
                   strata_buffer_append(b, data, len) != 0
               ? -1
               : 0;
}

#endif
