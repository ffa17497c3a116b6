/*
 * kubernetes_internal.h - what the files of lib/kubernetes share: the resolved connection to an
 * API server (from api_server options, a kubeconfig or the in-cluster service account) and how it
 * is applied to a curl handle.
 */
#ifndef STRATA_KUBERNETES_INTERNAL_H
#define STRATA_KUBERNETES_INTERNAL_H

#include <curl/curl.h>

#include "common/buffer.h"
#include "kubernetes/kubernetes.h"

/* Files this large are refused (tokens, certificates, kubeconfigs are a few KiB). */
#define KUBERNETES_MAX_FILE_BYTES (1u << 20)

typedef struct kubernetes_connection {
    char *server;            /* scheme://host[:port] without a trailing slash */
    char *connect_to;        /* CURLOPT_CONNECT_TO entry when tls server_name replaces the host */
    char *bearer_token;      /* a fixed token, or NULL */
    char *bearer_token_file; /* re-read before every request, or NULL */
    char *username;          /* basic auth, or NULL */
    char *password;
    char *ca_file;        /* PEM file, or NULL */
    strata_buffer ca_pem; /* PEM bytes (kubeconfig certificate-authority-data) */
    char *cert_file;      /* client certificate, or NULL */
    strata_buffer cert_pem;
    char *key_file;
    strata_buffer key_pem;
    bool insecure;       /* skip verification of the server's certificate */
    char *own_namespace; /* NULL when unknown */
} kubernetes_connection;

int kubernetes_connection_resolve(const kubernetes_sd_config *config, kubernetes_connection *out,
                                  strata_error *err);
void kubernetes_connection_free(kubernetes_connection *c);
/* Sets TLS and authentication options on h, appends the Authorization header to *headers and the
 * CURLOPT_CONNECT_TO entry (if any) to *connect_to; both lists must outlive the transfer. */
int kubernetes_connection_apply(const kubernetes_connection *c, CURL *h,
                                struct curl_slist **headers, struct curl_slist **connect_to,
                                strata_error *err);

/* Reads a whole small file into a NUL-terminated string; with trim, trailing whitespace is
 * dropped (token and namespace files end in a newline). */
int kubernetes_read_file(const char *path, bool trim, char **out, strata_error *err);

#endif
