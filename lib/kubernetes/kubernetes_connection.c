/*
 * kubernetes_connection.c - where the API server is and how to authenticate to it: explicit
 * api_server options, a kubeconfig's current context, or the in-cluster service account; and how
 * that becomes libcurl options.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/base64.h"
#include "kubernetes/kubernetes_internal.h"

const char *kubernetes_service_account_dir = KUBERNETES_DEFAULT_SERVICE_ACCOUNT_DIR;

int kubernetes_read_file(const char *path, bool trim, char **out, strata_error *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return strata_error_set(err, errno == ENOENT ? STRATA_NOT_FOUND : STRATA_UNAVAILABLE,
                                "cannot read %s: %s", path, strerror(errno));
    strata_buffer b = STRATA_BUFFER_INIT;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (b.len + n > KUBERNETES_MAX_FILE_BYTES) {
            fclose(f);
            strata_buffer_free(&b);
            return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED, "%s is larger than %u bytes",
                                    path, KUBERNETES_MAX_FILE_BYTES);
        }
        if (strata_buffer_append(&b, chunk, n) != 0) {
            fclose(f);
            strata_buffer_free(&b);
            return strata_error_oom(err);
        }
    }
    bool failed = ferror(f) != 0;
    fclose(f);
    if (failed) {
        strata_buffer_free(&b);
        return strata_error_set(err, STRATA_UNAVAILABLE, "cannot read %s", path);
    }
    while (trim && b.len > 0 &&
           (b.data[b.len - 1] == '\n' || b.data[b.len - 1] == '\r' || b.data[b.len - 1] == ' ' ||
            b.data[b.len - 1] == '\t'))
        b.len--;
    if ((*out = strata_buffer_detach(&b, NULL)) == NULL) {
        strata_buffer_free(&b);
        return strata_error_oom(err);
    }
    return 0;
}

void kubernetes_connection_free(kubernetes_connection *c) {
    free(c->server);
    free(c->connect_to);
    free(c->bearer_token);
    free(c->bearer_token_file);
    free(c->username);
    free(c->password);
    free(c->ca_file);
    strata_buffer_free(&c->ca_pem);
    free(c->cert_file);
    strata_buffer_free(&c->cert_pem);
    free(c->key_file);
    strata_buffer_free(&c->key_pem);
    free(c->own_namespace);
    memset(c, 0, sizeof *c);
}

/* Copies s (NULL stays NULL) into *dst. */
static int dup(char **dst, const char *s, strata_error *err) {
    *dst = NULL;
    if (s != NULL && (*dst = strdup(s)) == NULL)
        return strata_error_oom(err);
    return 0;
}

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int sa_path(const char *file, char *out, size_t out_len, strata_error *err) {
    int n = snprintf(out, out_len, "%s/%s", kubernetes_service_account_dir, file);
    if (n < 0 || (size_t)n >= out_len)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "service account path too long");
    return 0;
}

/* The namespace file of the service account, when there is one. */
static int read_sa_namespace(kubernetes_connection *c, strata_error *err) {
    char path[4096];
    if (sa_path("namespace", path, sizeof path, err) != 0)
        return -1;
    if (!file_exists(path))
        return 0;
    return kubernetes_read_file(path, true, &c->own_namespace, err);
}

/* Removes trailing slashes so paths can be appended. */
static void trim_server(char *server) {
    size_t len = strlen(server);
    while (len > 0 && server[len - 1] == '/')
        server[--len] = '\0';
}

/* tls server_name: connect to the URL's host but check the certificate against server_name, by
 * putting the name in the URL and telling curl where that name really lives. */
static int apply_server_name(kubernetes_connection *c, const char *server_name, strata_error *err) {
    CURLU *u = curl_url();
    char *host = NULL, *port = NULL, *url = NULL;
    int rc = -1;
    if (u == NULL)
        return strata_error_oom(err);
    if (curl_url_set(u, CURLUPART_URL, c->server, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK) {
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "cannot parse API server URL \"%s\"",
                         c->server);
        goto done;
    }
    size_t len = strlen(server_name) + strlen(host) + 2 * strlen(port) + 4;
    if ((c->connect_to = malloc(len)) == NULL) {
        strata_error_oom(err);
        goto done;
    }
    snprintf(c->connect_to, len, "%s:%s:%s:%s", server_name, port, host, port);
    if (curl_url_set(u, CURLUPART_HOST, server_name, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_URL, &url, 0) != CURLUE_OK) {
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "invalid tls_config.server_name \"%s\"",
                         server_name);
        goto done;
    }
    free(c->server);
    if ((c->server = strdup(url)) == NULL) {
        strata_error_oom(err);
        goto done;
    }
    trim_server(c->server);
    rc = 0;
done:
    curl_free(host);
    curl_free(port);
    curl_free(url);
    curl_url_cleanup(u);
    return rc;
}

static int resolve_api_server(const kubernetes_sd_config *config, kubernetes_connection *c,
                              strata_error *err) {
    const kubernetes_tls_config *tls = &config->tls_config;
    if (dup(&c->server, config->api_server, err) != 0 ||
        dup(&c->bearer_token, config->bearer_token, err) != 0 ||
        dup(&c->bearer_token_file, config->bearer_token_file, err) != 0 ||
        dup(&c->username, config->basic_auth.username, err) != 0 ||
        dup(&c->ca_file, tls->ca_file, err) != 0 || dup(&c->cert_file, tls->cert_file, err) != 0 ||
        dup(&c->key_file, tls->key_file, err) != 0)
        return -1;
    trim_server(c->server);
    c->insecure = tls->insecure_skip_verify;
    if (config->basic_auth.password_file != NULL) {
        if (kubernetes_read_file(config->basic_auth.password_file, true, &c->password, err) != 0)
            return -1;
    } else if (config->basic_auth.username != NULL &&
               dup(&c->password,
                   config->basic_auth.password != NULL ? config->basic_auth.password : "",
                   err) != 0) {
        return -1;
    }
    if (tls->server_name != NULL && apply_server_name(c, tls->server_name, err) != 0)
        return -1;
    return read_sa_namespace(c, err);
}

static int resolve_in_cluster(kubernetes_connection *c, strata_error *err) {
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    if (host == NULL || host[0] == '\0' || port == NULL || port[0] == '\0')
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "not running in a Kubernetes cluster: KUBERNETES_SERVICE_HOST and "
                                "KUBERNETES_SERVICE_PORT must be set (or give api_server or "
                                "kubeconfig_file)");
    size_t len = strlen(host) + strlen(port) + 16;
    if ((c->server = malloc(len)) == NULL)
        return strata_error_oom(err);
    bool v6 = strchr(host, ':') != NULL;
    snprintf(c->server, len, "https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port);
    char path[4096];
    if (sa_path("token", path, sizeof path, err) != 0 || dup(&c->bearer_token_file, path, err) != 0)
        return -1;
    if (!file_exists(path))
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "in-cluster discovery: no service account token at %s", path);
    if (sa_path("ca.crt", path, sizeof path, err) != 0 || dup(&c->ca_file, path, err) != 0)
        return -1;
    return read_sa_namespace(c, err);
}

/* ---- kubeconfig -------------------------------------------------------------------------------
 */

static const char *scalar(const config_node *n, const char *key) {
    const config_node *v = config_node_get(n, key);
    if (v == NULL || config_node_get_kind(v) != CONFIG_NODE_SCALAR || config_node_is_null(v))
        return NULL;
    return config_node_scalar(v, NULL);
}

/* The `inner` mapping of the entry of `list` (clusters, users, contexts) whose name is `name`. */
static const config_node *named_entry(const config_node *root, const char *list, const char *name,
                                      const char *inner) {
    const config_node *seq = config_node_get(root, list);
    for (size_t i = 0; i < config_node_size(seq); i++) {
        const config_node *item = config_node_at(seq, i);
        const char *n = scalar(item, "name");
        if (n != NULL && strcmp(n, name) == 0)
            return config_node_get(item, inner);
    }
    return NULL;
}

/* Kubeconfig paths are relative to the kubeconfig's directory. */
static int kubeconfig_path(const char *kubeconfig, const char *path, char **out,
                           strata_error *err) {
    const char *slash = strrchr(kubeconfig, '/');
    if (path[0] == '/' || slash == NULL)
        return dup(out, path, err);
    size_t dir_len = (size_t)(slash - kubeconfig) + 1, len = strlen(path);
    if ((*out = malloc(dir_len + len + 1)) == NULL)
        return strata_error_oom(err);
    memcpy(*out, kubeconfig, dir_len);
    memcpy(*out + dir_len, path, len + 1);
    return 0;
}

/* A PEM item given as `<key>-data` (base64) or `<key>` (a path). */
static int kubeconfig_pem(const char *kubeconfig, const config_node *n, const char *key,
                          char **file, strata_buffer *pem, strata_error *err) {
    char data_key[64];
    snprintf(data_key, sizeof data_key, "%s-data", key);
    const char *data = scalar(n, data_key);
    if (data != NULL) {
        if (strata_base64_decode(data, strlen(data), pem, err) != 0)
            return strata_error_wrap(err, "%s: %s", kubeconfig, data_key);
        return 0;
    }
    const char *path = scalar(n, key);
    return path != NULL ? kubeconfig_path(kubeconfig, path, file, err) : 0;
}

static int resolve_kubeconfig_user(const char *file, const config_node *user,
                                   kubernetes_connection *c, strata_error *err) {
    if (config_node_get(user, "exec") != NULL || config_node_get(user, "auth-provider") != NULL)
        return strata_error_set(err, STRATA_UNIMPLEMENTED,
                                "%s: users with exec or auth-provider credentials are not "
                                "supported; use a token (e.g. a service account token)",
                                file);
    const char *token_file = scalar(user, "tokenFile");
    if (dup(&c->bearer_token, scalar(user, "token"), err) != 0 ||
        (c->bearer_token == NULL && token_file != NULL &&
         kubeconfig_path(file, token_file, &c->bearer_token_file, err) != 0) ||
        dup(&c->username, scalar(user, "username"), err) != 0 ||
        dup(&c->password, scalar(user, "password"), err) != 0)
        return -1;
    if (c->username != NULL && c->password == NULL && dup(&c->password, "", err) != 0)
        return -1;
    if (kubeconfig_pem(file, user, "client-certificate", &c->cert_file, &c->cert_pem, err) != 0 ||
        kubeconfig_pem(file, user, "client-key", &c->key_file, &c->key_pem, err) != 0)
        return -1;
    return 0;
}

static int resolve_kubeconfig_tree(const char *file, const config_node *root,
                                   kubernetes_connection *c, strata_error *err) {
    const char *current = scalar(root, "current-context");
    if (current == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: no current-context", file);
    const config_node *context = named_entry(root, "contexts", current, "context");
    if (context == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: context \"%s\" not found", file,
                                current);
    const char *cluster_name = scalar(context, "cluster");
    const config_node *cluster =
        cluster_name != NULL ? named_entry(root, "clusters", cluster_name, "cluster") : NULL;
    if (cluster == NULL || scalar(cluster, "server") == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "%s: context \"%s\" names no cluster with a server", file, current);
    if (dup(&c->server, scalar(cluster, "server"), err) != 0 ||
        dup(&c->own_namespace,
            scalar(context, "namespace") != NULL ? scalar(context, "namespace") : "default",
            err) != 0 ||
        kubeconfig_pem(file, cluster, "certificate-authority", &c->ca_file, &c->ca_pem, err) != 0)
        return -1;
    trim_server(c->server);
    const char *insecure = scalar(cluster, "insecure-skip-tls-verify");
    if (insecure != NULL && !config_parse_bool(insecure, &c->insecure))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "%s: insecure-skip-tls-verify must be true or false", file);
    const char *server_name = scalar(cluster, "tls-server-name");
    if (server_name != NULL && apply_server_name(c, server_name, err) != 0)
        return -1;
    const char *user_name = scalar(context, "user");
    const config_node *user =
        user_name != NULL ? named_entry(root, "users", user_name, "user") : NULL;
    if (user_name != NULL && user == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: user \"%s\" not found", file,
                                user_name);
    return user != NULL ? resolve_kubeconfig_user(file, user, c, err) : 0;
}

static int resolve_kubeconfig(const char *file, kubernetes_connection *c, strata_error *err) {
    config_document *doc = NULL;
    if (config_load_file(file, &doc, err) != 0)
        return strata_error_wrap(err, "kubeconfig");
    const config_node *root = config_document_root(doc);
    int rc = -1;
    if (root == NULL || config_node_get_kind(root) != CONFIG_NODE_MAPPING)
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: not a kubeconfig", file);
    else
        rc = resolve_kubeconfig_tree(file, root, c, err);
    config_document_free(doc);
    return rc;
}

int kubernetes_connection_resolve(const kubernetes_sd_config *config, kubernetes_connection *out,
                                  strata_error *err) {
    memset(out, 0, sizeof *out);
    int rc;
    if (config->api_server != NULL)
        rc = resolve_api_server(config, out, err);
    else if (config->kubeconfig_file != NULL)
        rc = resolve_kubeconfig(config->kubeconfig_file, out, err);
    else
        rc = resolve_in_cluster(out, err);
    if (rc != 0)
        kubernetes_connection_free(out);
    return rc;
}

static int curl_failed(CURLcode rc, const char *what, strata_error *err) {
    return strata_error_set(err, STRATA_INTERNAL, "libcurl %s: %s", what, curl_easy_strerror(rc));
}

static int apply_tls(const kubernetes_connection *c, CURL *h, strata_error *err) {
    CURLcode rc = CURLE_OK;
    if (c->ca_file != NULL && (rc = curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file)) != CURLE_OK)
        return curl_failed(rc, "CAINFO", err);
    if (c->ca_pem.len > 0) {
        struct curl_blob blob = {c->ca_pem.data, c->ca_pem.len, CURL_BLOB_COPY};
        if ((rc = curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &blob)) != CURLE_OK)
            return curl_failed(rc, "CAINFO_BLOB", err);
    }
    if (c->cert_file != NULL &&
        (rc = curl_easy_setopt(h, CURLOPT_SSLCERT, c->cert_file)) != CURLE_OK)
        return curl_failed(rc, "SSLCERT", err);
    if (c->key_file != NULL && (rc = curl_easy_setopt(h, CURLOPT_SSLKEY, c->key_file)) != CURLE_OK)
        return curl_failed(rc, "SSLKEY", err);
    if (c->cert_pem.len > 0) {
        struct curl_blob blob = {c->cert_pem.data, c->cert_pem.len, CURL_BLOB_COPY};
        if ((rc = curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &blob)) != CURLE_OK)
            return curl_failed(rc, "SSLCERT_BLOB", err);
    }
    if (c->key_pem.len > 0) {
        struct curl_blob blob = {c->key_pem.data, c->key_pem.len, CURL_BLOB_COPY};
        if ((rc = curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &blob)) != CURLE_OK)
            return curl_failed(rc, "SSLKEY_BLOB", err);
    }
    if (c->insecure && ((rc = curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L)) != CURLE_OK ||
                        (rc = curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L)) != CURLE_OK))
        return curl_failed(rc, "SSL_VERIFY", err);
    return 0;
}

static int append_header(struct curl_slist **headers, const char *line, strata_error *err) {
    struct curl_slist *grown = curl_slist_append(*headers, line);
    if (grown == NULL)
        return strata_error_oom(err);
    *headers = grown;
    return 0;
}

static int apply_auth(const kubernetes_connection *c, CURL *h, struct curl_slist **headers,
                      strata_error *err) {
    CURLcode rc;
    if (c->username != NULL) {
        if ((rc = curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC)) != CURLE_OK ||
            (rc = curl_easy_setopt(h, CURLOPT_USERNAME, c->username)) != CURLE_OK ||
            (rc = curl_easy_setopt(h, CURLOPT_PASSWORD, c->password)) != CURLE_OK)
            return curl_failed(rc, "basic auth", err);
        return 0;
    }
    char *token = NULL;
    if (c->bearer_token_file != NULL) {
        if (kubernetes_read_file(c->bearer_token_file, true, &token, err) != 0)
            return -1;
    } else if (c->bearer_token != NULL && (token = strdup(c->bearer_token)) == NULL) {
        return strata_error_oom(err);
    }
    if (token == NULL)
        return 0;
    strata_buffer line = STRATA_BUFFER_INIT;
    int result = 0;
    if (strata_buffer_appendf(&line, "Authorization: Bearer %s", token) != 0 ||
        strata_buffer_append_byte(&line, 0) != 0)
        result = strata_error_oom(err);
    else
        result = append_header(headers, (const char *)line.data, err);
    /* The token is a secret: do not leave it in freed memory. */
    memset(token, 0, strlen(token));
    if (line.data != NULL)
        memset(line.data, 0, line.len);
    free(token);
    strata_buffer_free(&line);
    return result;
}

int kubernetes_connection_apply(const kubernetes_connection *c, CURL *h,
                                struct curl_slist **headers, struct curl_slist **connect_to,
                                strata_error *err) {
    if (apply_tls(c, h, err) != 0 || apply_auth(c, h, headers, err) != 0)
        return -1;
    if (c->connect_to != NULL) {
        if (append_header(connect_to, c->connect_to, err) != 0)
            return -1;
        CURLcode rc = curl_easy_setopt(h, CURLOPT_CONNECT_TO, *connect_to);
        if (rc != CURLE_OK)
            return curl_failed(rc, "CONNECT_TO", err);
    }
    return 0;
}
