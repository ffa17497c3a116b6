/*
 * http_request.c - request-line decoding, request accessors and response building; see http.h.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/array.h"
#include "common/clock.h"
#include "http/http_internal.h"

/* --- decoding -------------------------------------------------------------------------------- */

static int hex_value(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decodes s in place. Fails on a truncated or non-hex escape and on an encoded NUL. */
static int percent_decode(char *s, bool plus_is_space) {
    char *out = s;
    for (const char *in = s; *in != '\0'; in++) {
        if (*in == '%') {
            int hi = hex_value(in[1]);
            int lo = hi < 0 ? -1 : hex_value(in[2]);
            if (lo < 0 || (hi == 0 && lo == 0))
                return -1;
            *out++ = (char)(hi * 16 + lo);
            in += 2;
        } else {
            *out++ = (plus_is_space && *in == '+') ? ' ' : *in;
        }
    }
    *out = '\0';
    return 0;
}

static size_t count_params(const char *q) {
    size_t n = 1;
    for (; *q; q++)
        n += *q == '&';
    return n;
}

/* Splits the query (a private copy) into decoded key/value pairs; empty pieces are skipped. */
static int parse_query(http_request *r, const char *query) {
    r->query_storage = strdup(query);
    r->params = calloc(count_params(query), sizeof *r->params);
    if (r->query_storage == NULL || r->params == NULL)
        return -1;
    char *save = NULL;
    for (char *piece = strtok_r(r->query_storage, "&", &save); piece != NULL;
         piece = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(piece, '=');
        char *value = eq ? eq + 1 : piece + strlen(piece);
        if (eq != NULL)
            *eq = '\0';
        if (percent_decode(piece, true) != 0 || percent_decode(value, true) != 0)
            return -1;
        r->params[r->n_params++] = (http_query_param){piece, value};
    }
    return 0;
}

int http_request_parse_uri(http_request *r) {
    const char *uri = r->raw_uri;
    if (uri[0] != '/')
        return -1;
    const char *q = strchr(uri, '?');
    size_t path_len = q ? (size_t)(q - uri) : strlen(uri);
    r->path = strndup(uri, path_len);
    if (r->path == NULL || percent_decode(r->path, false) != 0)
        return -1;
    r->rest = r->path + strlen(r->path);
    return q ? parse_query(r, q + 1) : 0;
}

/* --- request --------------------------------------------------------------------------------- */

http_request *http_request_new(http_server *s, const char *uri) {
    http_request *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    r->raw_uri = strdup(uri ? uri : "");
    if (r->raw_uri == NULL) {
        free(r);
        return NULL;
    }
    r->server = s;
    r->start_ns = strata_monotonic_ns();
    strata_buffer_init(&r->body);
    http_response_init(&r->resp);
    return r;
}

void http_request_free(http_request *r) {
    if (r == NULL)
        return;
    free(r->raw_uri);
    free(r->path);
    free(r->query_storage);
    free(r->params);
    strata_buffer_free(&r->body);
    http_response_release(&r->resp);
    free(r);
}

void http_request_set_peer(http_request *r) {
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = info ? info->client_addr : NULL;
    char ip[INET6_ADDRSTRLEN + 2] = "unknown";
    unsigned port = 0;
    if (sa != NULL && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
        port = ntohs(in->sin_port);
    } else if (sa != NULL && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        char tmp[INET6_ADDRSTRLEN];
        if (inet_ntop(AF_INET6, &in6->sin6_addr, tmp, sizeof tmp) != NULL)
            snprintf(ip, sizeof ip, "[%s]", tmp);
        port = ntohs(in6->sin6_port);
    }
    snprintf(r->peer, sizeof r->peer, "%s:%u", ip, port);
}

const char *http_request_method(const http_request *r) {
    return r->method;
}

const char *http_request_path(const http_request *r) {
    return r->path;
}

const char *http_request_path_rest(const http_request *r) {
    return r->rest;
}

const char *http_request_query(const http_request *r, const char *key) {
    for (size_t i = 0; i < r->n_params; i++)
        if (strcmp(r->params[i].key, key) == 0)
            return r->params[i].value;
    return NULL;
}

size_t http_request_query_all(const http_request *r, const char *key, const char **values,
                              size_t max) {
    size_t n = 0;
    for (size_t i = 0; i < r->n_params; i++) {
        if (strcmp(r->params[i].key, key) != 0)
            continue;
        if (n < max)
            values[n] = r->params[i].value;
        n++;
    }
    return n;
}

const char *http_request_header(const http_request *r, const char *name) {
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const uint8_t *http_request_body(const http_request *r, size_t *len) {
    *len = r->body.len;
    return r->body.data;
}

const char *http_request_peer(const http_request *r) {
    return r->peer;
}

/* --- response -------------------------------------------------------------------------------- */

void http_response_init(http_response *resp) {
    memset(resp, 0, sizeof *resp);
    resp->status = 200;
    resp->fd = -1;
    strata_buffer_init(&resp->body);
}

void http_response_release(http_response *resp) {
    free(resp->content_type);
    for (size_t i = 0; i < resp->n_headers * 2; i++)
        free(resp->headers[i]);
    free(resp->headers);
    strata_buffer_free(&resp->body);
    if (resp->fd >= 0)
        close(resp->fd);
    http_response_init(resp);
}

void http_response_set_status(http_response *resp, unsigned status) {
    resp->status = status;
}

static bool valid_header_value(const char *v) {
    for (; *v; v++)
        if ((unsigned char)*v < 0x20 && *v != '\t')
            return false;
    return true;
}

static bool valid_header_name(const char *n) {
    if (*n == '\0')
        return false;
    for (; *n; n++)
        if ((unsigned char)*n <= 0x20 || (unsigned char)*n >= 0x7f ||
            strchr("()<>@,;:\\\"/[]?={}", *n) != NULL)
            return false;
    return true;
}

int http_response_set_content_type(http_response *resp, const char *type) {
    if (type == NULL || !valid_header_value(type)) {
        resp->invalid = true;
        return -1;
    }
    char *copy = strdup(type);
    if (copy == NULL) {
        resp->invalid = true;
        return -1;
    }
    free(resp->content_type);
    resp->content_type = copy;
    return 0;
}

int http_response_add_header(http_response *resp, const char *name, const char *value) {
    if (name == NULL || value == NULL || !valid_header_name(name) || !valid_header_value(value))
        return -1;
    if (STRATA_ARRAY_RESERVE(resp->headers, resp->cap_headers, (resp->n_headers + 1) * 2) != 0) {
        resp->invalid = true;
        return -1;
    }
    char **v = resp->headers;
    char *n = strdup(name), *val = strdup(value);
    if (n == NULL || val == NULL) {
        free(n);
        free(val);
        resp->invalid = true;
        return -1;
    }
    v[resp->n_headers * 2] = n;
    v[resp->n_headers * 2 + 1] = val;
    resp->n_headers++;
    return 0;
}

strata_buffer *http_response_body(http_response *resp) {
    return &resp->body;
}

int http_response_send_file(http_response *resp, int fd, uint64_t size) {
    if (fd < 0 || size > SIZE_MAX) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (resp->fd >= 0)
        close(resp->fd);
    resp->fd = fd;
    resp->file_size = size;
    return 0;
}

static bool wants_json(const http_request *req) {
    const char *accept = req ? http_request_header(req, "Accept") : NULL;
    return accept != NULL && strstr(accept, "application/json") != NULL;
}

static int append_json_string(strata_buffer *b, const char *s) {
    if (strata_buffer_append_byte(b, '"') != 0)
        return -1;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        int rc;
        if (c == '"' || c == '\\')
            rc = strata_buffer_appendf(b, "\\%c", c);
        else if (c < 0x20)
            rc = strata_buffer_appendf(b, "\\u%04x", c);
        else
            rc = strata_buffer_append_byte(b, c);
        if (rc != 0)
            return -1;
    }
    return strata_buffer_append_byte(b, '"');
}

void http_response_error(http_response *resp, const http_request *req, unsigned status,
                         const char *message) {
    strata_buffer_reset(&resp->body);
    if (resp->fd >= 0) {
        close(resp->fd);
        resp->fd = -1;
    }
    resp->status = status;
    int rc;
    if (wants_json(req)) {
        rc = http_response_set_content_type(resp, "application/json");
        if (rc == 0)
            rc = strata_buffer_append_str(&resp->body, "{\"error\":");
        if (rc == 0)
            rc = append_json_string(&resp->body, message);
        if (rc == 0)
            rc = strata_buffer_appendf(&resp->body, ",\"status\":%u}\n", status);
    } else {
        rc = http_response_set_content_type(resp, "text/plain; charset=utf-8");
        if (rc == 0)
            rc = strata_buffer_appendf(&resp->body, "%s\n", message);
    }
    if (rc != 0)
        resp->invalid = true;
}

unsigned http_status_from_strata(strata_status code) {
    switch (code) {
        case STRATA_OK:
            return 200;
        case STRATA_CANCELLED:
            return 499;
        case STRATA_INVALID_ARGUMENT:
        case STRATA_OUT_OF_RANGE:
        case STRATA_FAILED_PRECONDITION:
            return 400;
        case STRATA_DEADLINE_EXCEEDED:
            return 504;
        case STRATA_NOT_FOUND:
            return 404;
        case STRATA_ALREADY_EXISTS:
        case STRATA_ABORTED:
            return 409;
        case STRATA_PERMISSION_DENIED:
            return 403;
        case STRATA_UNAUTHENTICATED:
            return 401;
        case STRATA_RESOURCE_EXHAUSTED:
            return 429;
        case STRATA_UNIMPLEMENTED:
            return 501;
        case STRATA_UNAVAILABLE:
            return 503;
        default:
            return 500;
    }
}

void http_response_strata_error(http_response *resp, const http_request *req,
                                const strata_error *err) {
    strata_status code = err ? err->code : STRATA_UNKNOWN;
    const char *msg = err && err->message[0] ? err->message : strata_status_name(code);
    http_response_error(resp, req, http_status_from_strata(code), msg);
}

/* --- conversion to libmicrohttpd ------------------------------------------------------------- */

static struct MHD_Response *mhd_body(http_response *resp) {
    if (resp->fd >= 0) {
        struct MHD_Response *m = MHD_create_response_from_fd((size_t)resp->file_size, resp->fd);
        if (m != NULL)
            resp->fd = -1; /* MHD closes it */
        return m;
    }
    size_t len = 0;
    char *data = strata_buffer_detach(&resp->body, &len);
    if (data == NULL)
        return NULL;
    struct MHD_Response *m = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
    if (m == NULL)
        free(data);
    return m;
}

static int mhd_headers(http_response *resp, struct MHD_Response *m, bool close_connection) {
    const char *type = resp->content_type ? resp->content_type : "text/plain; charset=utf-8";
    if (MHD_add_response_header(m, MHD_HTTP_HEADER_CONTENT_TYPE, type) != MHD_YES)
        return -1;
    for (size_t i = 0; i < resp->n_headers; i++)
        if (MHD_add_response_header(m, resp->headers[2 * i], resp->headers[2 * i + 1]) != MHD_YES)
            return -1;
    if (close_connection &&
        MHD_add_response_header(m, MHD_HTTP_HEADER_CONNECTION, "close") != MHD_YES)
        return -1;
    return 0;
}

struct MHD_Response *http_response_to_mhd(http_response *resp, bool close_connection) {
    struct MHD_Response *m = mhd_body(resp);
    if (m != NULL && mhd_headers(resp, m, close_connection) != 0) {
        MHD_destroy_response(m);
        m = NULL;
    }
    return m;
}
