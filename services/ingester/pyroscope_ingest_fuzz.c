/*
 * pyroscope_ingest_fuzz.c - libFuzzer target for pyroscope_ingest_to_write_raw: Pyroscope's
 * /ingest request from arbitrary bytes. The first byte picks the format parameter and whether the
 * body is sent as multipart/form-data (boundary "B"); the bytes up to the first newline are the
 * name parameter, the rest the body. Checks that a refusal is INVALID_ARGUMENT or
 * RESOURCE_EXHAUSTED with nothing appended, and that an accepted request packs a WriteRawRequest
 * that WriteRaw's own parser reads as one series of one profile (or refuses by its rules only).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pyroscope_ingest.h"
#include "write_raw.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok) {
    if (!ok)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const formats[] = {NULL, "pprof", "folded", "lines", "jfr"};
    if (size < 1)
        return 0;
    uint8_t mode = data[0];
    data++, size--;
    const uint8_t *nl = memchr(data, '\n', size);
    size_t name_len = nl != NULL ? (size_t)(nl - data) : size;
    char *name = malloc(name_len + 1);
    if (name == NULL)
        return 0;
    memcpy(name, data, name_len);
    name[name_len] = '\0';
    size_t skip = nl != NULL ? name_len + 1 : name_len;
    pyroscope_ingest_params p = {
        .name = strlen(name) == name_len ? name : "app.cpu",
        .from = "1767225600",
        .until = "1767225610",
        .sample_rate = (mode & 0x20) ? "97" : NULL,
        .spy_name = "gospy",
        .format = formats[(mode & 7) % 5],
        .content_type =
            (mode & 0x10) ? "multipart/form-data; boundary=B" : "application/octet-stream",
        .body = data + skip,
        .body_len = size - skip,
    };
    ingest_limits limits;
    ingest_limits_default(&limits);
    limits.pprof.max_decompressed_bytes = 1 << 20;
    limits.pprof.max_samples = 10000;
    strata_buffer out = STRATA_BUFFER_INIT;
    strata_error err;
    if (pyroscope_ingest_to_write_raw(&p, &limits, 1767225600LL * 1000000000LL, &out, &err) != 0) {
        check(err.code == STRATA_INVALID_ARGUMENT || err.code == STRATA_RESOURCE_EXHAUSTED);
        check(out.len == 0);
    } else {
        ingest_request req;
        ingest_reject_reason reason;
        if (ingest_request_parse(out.data, out.len, &limits, 1, &req, &reason, &err) == 0) {
            check(req.n_series == 1 && req.n_pprofs == 1);
        } else {
            check(err.code == STRATA_INVALID_ARGUMENT || err.code == STRATA_RESOURCE_EXHAUSTED);
        }
        ingest_request_free(&req);
    }
    strata_buffer_free(&out);
    free(name);
    return 0;
}
