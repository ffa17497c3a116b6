/*
 * http_static.c - serving a directory of static files (the UI); see http.h for the traversal
 * rules. The path after the route prefix is rebuilt segment by segment (dot segments refused) and
 * opened with openat2(RESOLVE_BENEATH) relative to a descriptor of the root, which the kernel
 * enforces against "..", absolute paths and symlinks alike.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "http/http_internal.h"

typedef struct http_static {
    char *root; /* canonical path of the root directory */
    int root_fd;
    char *prefix;
} http_static;

static const struct {
    const char *ext;
    const char *type;
} content_types[] = {
    {"html", "text/html; charset=utf-8"},
    {"htm", "text/html; charset=utf-8"},
    {"css", "text/css; charset=utf-8"},
    {"js", "text/javascript; charset=utf-8"},
    {"mjs", "text/javascript; charset=utf-8"},
    {"json", "application/json"},
    {"map", "application/json"},
    {"txt", "text/plain; charset=utf-8"},
    {"svg", "image/svg+xml"},
    {"png", "image/png"},
    {"jpg", "image/jpeg"},
    {"jpeg", "image/jpeg"},
    {"gif", "image/gif"},
    {"webp", "image/webp"},
    {"ico", "image/x-icon"},
    {"woff", "font/woff"},
    {"woff2", "font/woff2"},
    {"ttf", "font/ttf"},
    {"wasm", "application/wasm"},
    {"pdf", "application/pdf"},
    {"xml", "application/xml"},
};

const char *http_content_type_for(const char *filename) {
    const char *slash = strrchr(filename, '/');
    const char *dot = strrchr(slash ? slash : filename, '.');
    if (dot != NULL)
        for (size_t i = 0; i < sizeof content_types / sizeof content_types[0]; i++)
            if (strcasecmp(dot + 1, content_types[i].ext) == 0)
                return content_types[i].type;
    return "application/octet-stream";
}

/* Rebuilds the request path as "a/b/c" relative to the root. Empty and "." segments are dropped
 * (so a leading '/' cannot make it absolute); "..", hidden names and backslashes are refused. */
int http_static_relative_path(const char *rest, char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    while (*rest != '\0') {
        const char *end = strchr(rest, '/');
        size_t len = end ? (size_t)(end - rest) : strlen(rest);
        bool skip = len == 0 || (len == 1 && rest[0] == '.');
        if (!skip && (rest[0] == '.' || memchr(rest, '\\', len) != NULL))
            return -1;
        if (!skip) {
            if (used + len + 2 > size)
                return -1;
            if (used > 0)
                out[used++] = '/';
            memcpy(out + used, rest, len);
            used += len;
            out[used] = '\0';
        }
        rest += len + (end != NULL);
    }
    return 0;
}

/* Fallback for kernels without openat2: resolve and check the result stays under the root. */
static int open_by_realpath(const http_static *st, const char *rel) {
    char full[PATH_MAX], resolved[PATH_MAX];
    if (snprintf(full, sizeof full, "%s/%s", st->root, rel) >= (int)sizeof full ||
        realpath(full, resolved) == NULL)
        return -1;
    size_t n = strlen(st->root);
    if (strncmp(resolved, st->root, n) != 0 || (resolved[n] != '/' && resolved[n] != '\0'))
        return -1;
    return open(resolved, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
}

static int open_beneath(const http_static *st, const char *rel) {
    struct open_how how = {.flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
    long fd = syscall(SYS_openat2, st->root_fd, rel[0] ? rel : ".", &how, sizeof how);
    if (fd >= 0 || errno != ENOSYS)
        return (int)fd;
    return open_by_realpath(st, rel);
}

static void redirect_to_directory(const http_request *req, http_response *resp) {
    const char *uri = req->raw_uri;
    while (uri[0] == '/' && uri[1] == '/')
        uri++; /* "//host/x" would be a redirect to another site */
    size_t len = strcspn(uri, "?");
    char location[2048];
    if (snprintf(location, sizeof location, "%.*s/%s", (int)len, uri, uri + len) >=
        (int)sizeof location) {
        http_response_error(resp, req, 404, "not found");
        return;
    }
    http_response_set_status(resp, 301);
    http_response_add_header(resp, MHD_HTTP_HEADER_LOCATION, location);
    strata_buffer_appendf(http_response_body(resp), "moved to %s\n", location);
}

/* Opens rel, or its index.html when it is a directory; fills *st_out. */
static int open_file(const http_static *st, const char *rel, bool *is_dir, char *name, size_t size,
                     struct stat *sb) {
    int fd = open_beneath(st, rel);
    if (fd < 0 || fstat(fd, sb) != 0)
        goto fail;
    *is_dir = S_ISDIR(sb->st_mode);
    snprintf(name, size, "%s", rel);
    if (*is_dir) {
        close(fd);
        if (snprintf(name, size, "%s%sindex.html", rel, rel[0] ? "/" : "") >= (int)size)
            return -1;
        fd = open_beneath(st, name);
        if (fd < 0 || fstat(fd, sb) != 0)
            goto fail;
    }
    if (S_ISREG(sb->st_mode))
        return fd;
fail:
    if (fd >= 0)
        close(fd);
    return -1;
}

static void serve_static(void *ctx, const http_request *req, http_response *resp) {
    const http_static *st = ctx;
    char rel[PATH_MAX], name[PATH_MAX];
    bool is_dir = false;
    struct stat sb;
    int fd = -1;
    if (http_static_relative_path(http_request_path_rest(req), rel, sizeof rel) == 0)
        fd = open_file(st, rel, &is_dir, name, sizeof name, &sb);
    if (fd < 0) {
        http_response_error(resp, req, 404, "not found");
        return;
    }
    const char *path = http_request_path(req);
    if (is_dir && path[strlen(path) - 1] != '/') {
        close(fd);
        redirect_to_directory(req, resp);
        return;
    }
    http_response_set_content_type(resp, http_content_type_for(name));
    http_response_add_header(resp, "X-Content-Type-Options", "nosniff");
    if (http_response_send_file(resp, fd, (uint64_t)sb.st_size) != 0)
        http_response_error(resp, req, 500, "cannot send file");
}

/* GET <prefix without slash> answers 301 to <prefix>. */
static void redirect_to_prefix(void *ctx, const http_request *req, http_response *resp) {
    const http_static *st = ctx;
    http_response_set_status(resp, 301);
    http_response_add_header(resp, MHD_HTTP_HEADER_LOCATION, st->prefix);
    strata_buffer_appendf(http_response_body(resp), "moved to %s\n", st->prefix);
}

static void static_free(void *ptr) {
    http_static *st = ptr;
    if (st->root_fd >= 0)
        close(st->root_fd);
    free(st->root);
    free(st->prefix);
    free(st);
}

static http_static *static_new(const char *prefix, const char *root_dir, strata_error *err) {
    http_static *st = calloc(1, sizeof *st);
    if (st == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    st->root_fd = -1;
    st->prefix = strdup(prefix);
    st->root = realpath(root_dir, NULL);
    if (st->prefix == NULL || st->root == NULL) {
        strata_error_set(err, st->prefix ? STRATA_NOT_FOUND : STRATA_RESOURCE_EXHAUSTED,
                         "static root %s: %s", root_dir, strerror(errno));
        static_free(st);
        return NULL;
    }
    st->root_fd = open(st->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (st->root_fd < 0) {
        strata_error_set(err, STRATA_NOT_FOUND, "static root %s: %s", root_dir, strerror(errno));
        static_free(st);
        return NULL;
    }
    return st;
}

int http_server_serve_static(http_server *s, const char *prefix, const char *root_dir,
                             strata_error *err) {
    size_t len = prefix ? strlen(prefix) : 0;
    if (s == NULL || root_dir == NULL || len == 0 || prefix[0] != '/' || prefix[len - 1] != '/')
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "static prefix must start and end with '/'");
    http_static *st = static_new(prefix, root_dir, err);
    if (st == NULL || http_server_own(s, st, static_free, err) != 0)
        return -1;
    if (http_server_route(s, "GET", prefix, HTTP_MATCH_PREFIX, serve_static, st, err) != 0)
        return -1;
    if (len == 1)
        return 0;
    char bare[1024];
    if (len >= sizeof bare)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "static prefix too long");
    memcpy(bare, prefix, len - 1);
    bare[len - 1] = '\0';
    return http_server_route(s, "GET", bare, HTTP_MATCH_EXACT, redirect_to_prefix, st, err);
}
