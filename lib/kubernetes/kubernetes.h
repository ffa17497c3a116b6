/*
 * kubernetes.h - Kubernetes pod discovery: `kubernetes_sd_configs` with role pod, as Prometheus
 * implements it, on a small API-server client built on libcurl.
 *
 * Design.
 *
 * Connection. A config names the API server in one of three ways, checked in this order:
 *   1. `api_server` (a URL), with optional bearer_token / bearer_token_file / basic_auth and
 *      tls_config, exactly as Prometheus's HTTP client options;
 *   2. `kubeconfig_file`: the current-context's cluster (server, certificate-authority or
 *      certificate-authority-data, insecure-skip-tls-verify, tls-server-name) and user (token,
 *      tokenFile, client-certificate[-data], client-key[-data], username/password). `exec` and
 *      `auth-provider` users are refused with a clear error: no plugin runs inside Strata;
 *   3. neither: in-cluster, from KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT and the service
 *      account's token, ca.crt and namespace files. Token files are re-read on every request
 *      (projected tokens rotate).
 * Secrets are handed to libcurl and never appear in errors or statistics.
 *
 * Discovery. One watcher thread per namespace (or one for all namespaces) runs client-go's
 * reflector loop: LIST /api/v1/pods (or /api/v1/namespaces/NS/pods) with the configured label and
 * field selectors, in pages of kubernetes_list_page_size pods following `continue`, then WATCH from
 * the list's resourceVersion with bookmarks. The watch is a chunked stream of one JSON event per
 * line: ADDED, MODIFIED, DELETED, BOOKMARK (advances the resourceVersion) and ERROR. An expired
 * resourceVersion - HTTP 410 Gone, or an ERROR event whose Status code is 410 - leads to a fresh
 * list at once; a watch the server ends normally is resumed from the last resourceVersion; any
 * other failure (connection refused, HTTP error, a malformed event, an oversized response) backs
 * off exponentially (kubernetes_backoff_initial_ms doubling to 30 s) and relists, since events may
 * have been lost. A list replaces the provider's view: pods that vanished since the previous list
 * are reported as gone. Freeing the discovery wakes the threads (curl_multi_wakeup) and joins them,
 * so shutdown does not wait for a watch to time out.
 *
 * Targets, as Prometheus builds them for role pod. One target group per pod, source
 * `pod/NAMESPACE/NAME`. The group's labels are __meta_kubernetes_namespace, _pod_name, _pod_ip,
 * _pod_ready (the Ready condition lower-cased: true, false or unknown), _pod_phase,
 * _pod_node_name, _pod_host_ip, _pod_uid, _pod_label_<name> and _pod_labelpresent_<name>,
 * _pod_annotation_<name> and _pod_annotationpresent_<name>, _pod_controller_kind and
 * _pod_controller_name (the owner reference with controller: true). Label and annotation names are
 * sanitized to [a-zA-Z0-9_] (every other byte becomes '_'). Each container (then each init
 * container) yields one target per declared port (`__address__` = podIP:port, IPv6 in brackets)
 * with _pod_container_port_name, _port_number and _port_protocol, or one target at the bare pod IP
 * if it declares none; each target has _pod_container_name, _pod_container_image,
 * _pod_container_init ("true"/"false") and _pod_container_id (from the container's status, e.g.
 * "containerd://<64 hex>", "" before it starts). A pod without an IP yet, or deleted, yields a
 * group with no targets: the consumer forgets that source.
 *
 * Limits. A list page over kubernetes_max_list_bytes, a watch event line over
 * kubernetes_max_event_bytes, more than KUBERNETES_MAX_CONTAINERS containers or
 * KUBERNETES_MAX_PORTS ports per container is an error for that request (counted, backed off),
 * never an unbounded allocation.
 *
 * Errors. Being a library, discovery never logs: the last error and counters are read with
 * kubernetes_discovery_get_stats (the scraper shows them and logs changes).
 */
#ifndef STRATA_KUBERNETES_H
#define STRATA_KUBERNETES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "config/config.h"
#include "discovery/discovery.h"
#include "json/json.h"

#define KUBERNETES_MAX_CONTAINERS 256
#define KUBERNETES_MAX_PORTS 256
#define KUBERNETES_DEFAULT_SERVICE_ACCOUNT_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

/* ---- Configuration: one `kubernetes_sd_configs` entry ----------------------------------------
 */

typedef struct kubernetes_selector {
    char *role;  /* only "pod" */
    char *label; /* labelSelector, e.g. "app=api,tier!=cache" */
    char *field; /* fieldSelector, e.g. "spec.nodeName=node-1" */
} kubernetes_selector;

typedef struct kubernetes_basic_auth {
    char *username;
    char *password;
    char *password_file;
} kubernetes_basic_auth;

typedef struct kubernetes_tls_config {
    char *ca_file;
    char *cert_file;
    char *key_file;
    char *server_name; /* name checked against the server's certificate (and sent as SNI) */
    bool insecure_skip_verify;
} kubernetes_tls_config;

typedef struct kubernetes_namespaces {
    bool own_namespace; /* add the namespace Strata runs in */
    config_string_list names;
} kubernetes_namespaces;

typedef struct kubernetes_sd_config {
    char *role;
    char *api_server;
    char *kubeconfig_file;
    kubernetes_namespaces namespaces;
    config_struct_list selectors; /* kubernetes_selector */
    char *bearer_token;
    char *bearer_token_file;
    kubernetes_basic_auth basic_auth;
    kubernetes_tls_config tls_config;
} kubernetes_sd_config;

typedef struct kubernetes_sd_config_list {
    kubernetes_sd_config *items;
    size_t count;
} kubernetes_sd_config_list;

/* Decodes one mapping into a kubernetes_sd_config (dst) and checks it as Prometheus does: role
 * must be pod (other roles: "role \"service\" is not supported"), api_server and kubeconfig_file
 * exclude each other and kubeconfig_file excludes the auth and TLS options, bearer_token excludes
 * bearer_token_file and basic_auth, selectors must have role pod and at least one of label and
 * field. Relative file paths are resolved against the directory of the config file. Unknown keys
 * are errors with file:line. Signature of a config_decode_fn, for CONFIG_CUSTOM fields. */
int kubernetes_sd_config_decode(const config_node *node, void *dst, strata_error *err);
void kubernetes_sd_config_release(void *dst);
/* Decodes a sequence of entries into a kubernetes_sd_config_list (dst): the `kubernetes_sd_configs`
 * key of a scrape config, as a CONFIG_CUSTOM field with elem_size
 * sizeof(kubernetes_sd_config_list).
 */
int kubernetes_sd_configs_decode(const config_node *node, void *dst, strata_error *err);
void kubernetes_sd_configs_release(void *dst);

/* ---- Pods as targets --------------------------------------------------------------------------
 */

/* Builds the target group of one Pod object (see the top of this file). *out is overwritten.
 * INVALID_ARGUMENT when the object lacks metadata.name or metadata.namespace, RESOURCE_EXHAUSTED
 * past the container or port limits. */
int kubernetes_pod_target_group(const json_value *pod, target_group *out, strata_error *err);

/* Sanitizes a Kubernetes label or annotation name into a Prometheus label name suffix: every byte
 * outside [a-zA-Z0-9_] becomes '_'. Writes a NUL-terminated string into out (truncated to fit). */
void kubernetes_sanitize_label_name(const char *name, char *out, size_t out_len);

/* ---- Discovery --------------------------------------------------------------------------------
 */

typedef struct kubernetes_discovery kubernetes_discovery;

typedef struct kubernetes_discovery_stats {
    uint64_t lists;                            /* complete lists (all pages) */
    uint64_t watches;                          /* watch requests started */
    uint64_t events;                           /* watch events applied (BOOKMARK included) */
    uint64_t expired;                          /* relists forced by 410 Gone */
    uint64_t errors;                           /* failed requests and malformed responses */
    bool synced;                               /* every namespace has been listed once */
    char last_error[STRATA_ERROR_MESSAGE_MAX]; /* "" until the first error */
} kubernetes_discovery_stats;

/* Resolves the connection (errors such as a missing KUBERNETES_SERVICE_HOST, an unreadable
 * kubeconfig or CA file are returned here) and starts the watcher threads; `update` then receives
 * every change on those threads, serialised (never two calls at once). NULL on failure. */
kubernetes_discovery *kubernetes_discovery_new(const kubernetes_sd_config *config,
                                               discovery_update_fn update, void *ctx,
                                               strata_error *err);
/* Stops and joins the threads; no update runs after it returns. NULL is a no-op. */
void kubernetes_discovery_free(kubernetes_discovery *d);
void kubernetes_discovery_get_stats(kubernetes_discovery *d, kubernetes_discovery_stats *out);

/* Knobs for tests and unusual deployments; set them before creating a discovery. */
extern const char
    *kubernetes_service_account_dir;      /* default KUBERNETES_DEFAULT_SERVICE_ACCOUNT_DIR */
extern size_t kubernetes_max_list_bytes;  /* default 64 MiB per list page */
extern size_t kubernetes_max_event_bytes; /* default 8 MiB per watch event */
extern int kubernetes_backoff_initial_ms; /* default 250; doubles up to 30 s */
extern int kubernetes_watch_timeout_s;    /* 0 (default): 300-600 s, randomised as client-go */
extern int kubernetes_list_page_size;     /* default 500 pods per list request */

#endif
