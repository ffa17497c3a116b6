/*
 * pbjson_fuzz.c - libFuzzer target: arbitrary bytes as the JSON of a Parca QueryRequest (what a
 * Connect JSON client sends to Query). When they decode, the message is written back as JSON,
 * which must decode to the same packed bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "parca/query/v1alpha1/query.pb-c.h"
#include "pbjson/pbjson.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const ProtobufCMessageDescriptor *d = &parca__query__v1alpha1__query_request__descriptor;
    strata_buffer bin = STRATA_BUFFER_INIT, json = STRATA_BUFFER_INIT, again = STRATA_BUFFER_INIT;
    strata_error err;
    if (pbjson_decode(d, (const char *)data, size, &bin, &err) == 0) {
        if (pbjson_encode(d, bin.data, bin.len, &json, &err) != 0)
            abort();
        if (pbjson_decode(d, (const char *)json.data, json.len, &again, &err) != 0)
            abort();
        /* NaN and -0.0 survive as text, and floats compare bitwise in the packed form */
        if (again.len != bin.len || memcmp(again.data, bin.data, bin.len) != 0)
            abort();
    }
    strata_buffer_free(&bin);
    strata_buffer_free(&json);
    strata_buffer_free(&again);
    return 0;
}
