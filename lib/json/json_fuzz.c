/*
 * json_fuzz.c - libFuzzer target: parses arbitrary bytes and, when they parse, writes the tree
 * back with the writer, parses that and checks the two trees are equal and that writing the
 * second gives the same text.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void write_value(json_writer *w, const json_value *v) {
    const char *s;
    size_t len;
    bool b;
    int64_t i;
    double d;
    switch (json_value_type(v)) {
        case JSON_NULL:
            json_null(w);
            return;
        case JSON_BOOL:
            if (!json_get_bool(v, &b))
                abort();
            json_bool(w, b);
            return;
        case JSON_NUMBER:
            if (json_get_int64(v, &i))
                json_int(w, i);
            else if (json_get_double(v, &d))
                json_double(w, d);
            else
                json_null(w); /* overflows a double */
            return;
        case JSON_STRING:
            if (!json_get_string(v, &s, &len) || strlen(s) != len)
                abort();
            json_string_len(w, s, len);
            return;
        case JSON_ARRAY:
            json_begin_array(w);
            for (size_t k = 0; k < json_array_length(v); k++)
                write_value(w, json_array_at(v, k));
            json_end_array(w);
            return;
        case JSON_OBJECT:
            json_begin_object(w);
            for (size_t k = 0; k < json_object_size(v); k++) {
                json_key(w, json_object_key_at(v, k));
                write_value(w, json_object_value_at(v, k));
            }
            json_end_object(w);
            return;
    }
    abort();
}

static char *write_document(const json_document *doc, size_t *len) {
    strata_buffer b = STRATA_BUFFER_INIT;
    json_writer w;
    json_writer_init(&w, &b);
    write_value(&w, json_document_root(doc));
    if (json_writer_finish(&w) != 0)
        abort();
    char *text = strata_buffer_detach(&b, len);
    if (text == NULL)
        abort();
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_document *doc;
    strata_error err;
    if (json_parse((const char *)data, size, &doc, &err) != 0) {
        if (doc != NULL ||
            (err.code != STRATA_INVALID_ARGUMENT && err.code != STRATA_RESOURCE_EXHAUSTED))
            abort();
        return 0;
    }
    size_t len1, len2;
    char *first = write_document(doc, &len1);
    json_document *again;
    if (json_parse(first, len1, &again, &err) != 0)
        abort(); /* the writer's output must parse */
    char *second = write_document(again, &len2);
    if (len1 != len2 || memcmp(first, second, len1) != 0)
        abort();
    free(first);
    free(second);
    json_document_free(again);
    json_document_free(doc);
    return 0;
}
