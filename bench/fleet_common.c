/*
 * fleet_common.c - see fleet_common.h. The time member is RFC 1952 (gzip) around one RFC 1951
 * stored block: header, BFINAL=1 BTYPE=00, LEN and its complement, the payload, CRC-32, ISIZE.
 */
#include "fleet_common.h"

#include <stdio.h>
#include <string.h>
#include <zlib.h>

static void put_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

size_t fleet_time_member(int64_t time_ns, uint8_t out[FLEET_TIME_MEMBER_MAX]) {
    uint8_t payload[11];
    size_t n = 0;
    payload[n++] = 9 << 3 | 0; /* Profile.time_nanos, varint */
    uint64_t v = (uint64_t)time_ns;
    while (v >= 0x80) {
        payload[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    payload[n++] = (uint8_t)v;
    static const uint8_t header[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff};
    size_t at = 0;
    memcpy(out, header, sizeof header);
    at += sizeof header;
    out[at++] = 0x01; /* final block, stored */
    out[at++] = (uint8_t)n;
    out[at++] = 0;
    out[at++] = (uint8_t)~n;
    out[at++] = 0xff;
    memcpy(out + at, payload, n);
    at += n;
    put_le32(out + at, (uint32_t)crc32(0L, payload, (uInt)n));
    at += 4;
    put_le32(out + at, (uint32_t)n);
    at += 4;
    return at;
}

int fleet_read_file(const char *path, strata_buffer *out) {
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    char buf[65536];
    size_t n;
    int rc = 0;
    while (rc == 0 && (n = fread(buf, 1, sizeof buf, f)) > 0)
        rc = strata_buffer_append(out, buf, n);
    if (ferror(f))
        rc = -1;
    fclose(f);
    return rc;
}
