/*
 * http_fuzz.c - libFuzzer target for the untrusted parts of a request line: the request-target
 * decoder (path and query) and the static-file path sanitizer. Checks that a decoded path starts
 * with '/' and that a sanitized static path is relative, without empty, dot or hidden segments.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http/http_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_relative(const char *rel) {
    if (rel[0] == '/' || strstr(rel, "//") != NULL)
        abort();
    for (const char *seg = rel; *seg != '\0';) {
        if (seg[0] == '.')
            abort();
        const char *slash = strchr(seg, '/');
        if (slash == NULL)
            break;
        seg = slash + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *uri = malloc(size + 1);
    if (uri == NULL)
        return 0;
    memcpy(uri, data, size);
    uri[size] = '\0';
    http_request *r = http_request_new(NULL, uri);
    if (r != NULL && http_request_parse_uri(r) == 0) {
        if (r->path[0] != '/')
            abort();
        const char *values[4];
        for (size_t i = 0; i < r->n_params; i++)
            if (http_request_query_all(r, r->params[i].key, values, 4) == 0)
                abort();
        char rel[256];
        if (http_static_relative_path(r->path, rel, sizeof rel) == 0)
            check_relative(rel);
    }
    http_request_free(r);
    free(uri);
    return 0;
}
