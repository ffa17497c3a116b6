/*
 * debuginfo_service.c - Parca's DebuginfoService for uploaded sources (debuginfo_service.h).
 *
 * Each call becomes a job on a detached thread: decode, check, talk to the bucket, answer. The
 * service counts its jobs under a lock, so debuginfo_service_free can wait for the last one; a
 * job finishes its call before it says it is done, and touches nothing of the service after.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/random_id.h"
#include "common/tenant.h"
#include "debuginfo/debuginfo.h"
#include "debuginfo_service.h"
#include "parca/debuginfo/v1alpha1/debuginfo.pb-c.h"

#define P(x) PARCA__DEBUGINFO__V1ALPHA1__##x
#define KEY_BYTES (STRATA_TENANT_MAX_LENGTH + DEBUGINFO_MAX_BUILD_ID + 64)

struct debuginfo_service {
    bucket *store;
    uint64_t max_upload_bytes;
    metrics_counter_vec *calls; /* by method and result */
    metrics_counter *uploaded_bytes;
    pthread_mutex_t lock;
    pthread_cond_t idle;
    size_t in_flight;
};

typedef int (*job_fn)(debuginfo_service *s, const char *tenant, const uint8_t *req, size_t len,
                      strata_buffer *resp, strata_error *err);

typedef struct job {
    debuginfo_service *svc;
    rpc_call *call;
    const uint8_t *req; /* valid until the call is finished */
    size_t len;
    job_fn fn;
    const char *method;
} job;

/* ---- the four methods ---- */

static int refuse_type(int type, strata_error *err) {
    if (type == P(DEBUGINFO_TYPE__DEBUGINFO_TYPE_SOURCES))
        return 0;
    return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                            "Strata stores only sources (DEBUGINFO_TYPE_SOURCES): it does not "
                            "symbolize on the server, so executables and debug information are not "
                            "used (symbolize in the agent)");
}

static int sources_exist(debuginfo_service *s, const char *tenant, const char *build_id,
                         bool *exists, strata_error *err) {
    char key[KEY_BYTES];
    if (debuginfo_sources_key(tenant, build_id, key, sizeof key, err) != 0)
        return -1;
    return bucket_exists(s->store, key, exists, err);
}

static int pack(const ProtobufCMessage *m, strata_buffer *resp, strata_error *err) {
    if (strata_buffer_reserve(resp, protobuf_c_message_get_packed_size(m)) != 0)
        return strata_error_oom(err);
    resp->len += protobuf_c_message_pack(m, resp->data + resp->len);
    return 0;
}

static int should_initiate(debuginfo_service *s, const char *tenant, const uint8_t *req, size_t len,
                           strata_buffer *resp, strata_error *err) {
    Parca__Debuginfo__V1alpha1__ShouldInitiateUploadRequest *r =
        parca__debuginfo__v1alpha1__should_initiate_upload_request__unpack(NULL, len, req);
    if (r == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "cannot decode ShouldInitiateUploadRequest");
    Parca__Debuginfo__V1alpha1__ShouldInitiateUploadResponse out =
        PARCA__DEBUGINFO__V1ALPHA1__SHOULD_INITIATE_UPLOAD_RESPONSE__INIT;
    char reason[256];
    bool exists = false;
    int rc = debuginfo_check_build_id(r->build_id, err);
    if (rc == 0 && r->type != P(DEBUGINFO_TYPE__DEBUGINFO_TYPE_SOURCES)) {
        snprintf(reason, sizeof reason,
                 "Strata stores only sources: executables and debug information are not used "
                 "(symbolize in the agent)");
    } else if (rc == 0 && (rc = sources_exist(s, tenant, r->build_id, &exists, err)) == 0) {
        out.should_initiate_upload = !exists || r->force;
        snprintf(reason, sizeof reason, "%s",
                 !exists    ? "no sources uploaded for this build id yet"
                 : r->force ? "sources exist; replacing them as forced"
                            : "sources for this build id are already uploaded");
    }
    out.reason = reason;
    if (rc == 0)
        rc = pack(&out.base, resp, err);
    parca__debuginfo__v1alpha1__should_initiate_upload_request__free_unpacked(r, NULL);
    return rc;
}

static int initiate(debuginfo_service *s, const char *tenant, const uint8_t *req, size_t len,
                    strata_buffer *resp, strata_error *err) {
    Parca__Debuginfo__V1alpha1__InitiateUploadRequest *r =
        parca__debuginfo__v1alpha1__initiate_upload_request__unpack(NULL, len, req);
    if (r == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "cannot decode InitiateUploadRequest");
    bool exists = false;
    char upload_id[STRATA_RANDOM_ID_LEN + 1];
    int rc = debuginfo_check_build_id(r->build_id, err);
    if (rc == 0)
        rc = refuse_type(r->type, err);
    if (rc == 0 && (r->size < 0 || (uint64_t)r->size > s->max_upload_bytes))
        rc = strata_error_set(err, STRATA_INVALID_ARGUMENT,
                              "size %" PRId64 " is over the limit of %" PRIu64
                              " bytes (ingester.max_source_upload_bytes)",
                              r->size, s->max_upload_bytes);
    if (rc == 0)
        rc = sources_exist(s, tenant, r->build_id, &exists, err);
    if (rc == 0 && exists && !r->force)
        rc = strata_error_set(err, STRATA_ALREADY_EXISTS,
                              "sources for build id %s are already uploaded", r->build_id);
    if (rc == 0)
        rc = strata_random_id(upload_id, err);
    if (rc == 0) {
        Parca__Debuginfo__V1alpha1__UploadInstructions in =
            PARCA__DEBUGINFO__V1ALPHA1__UPLOAD_INSTRUCTIONS__INIT;
        in.build_id = r->build_id;
        in.upload_id = upload_id;
        in.upload_strategy = P(UPLOAD_INSTRUCTIONS__UPLOAD_STRATEGY__UPLOAD_STRATEGY_GRPC);
        in.type = r->type;
        Parca__Debuginfo__V1alpha1__InitiateUploadResponse out =
            PARCA__DEBUGINFO__V1ALPHA1__INITIATE_UPLOAD_RESPONSE__INIT;
        out.upload_instructions = &in;
        rc = pack(&out.base, resp, err);
    }
    parca__debuginfo__v1alpha1__initiate_upload_request__free_unpacked(r, NULL);
    return rc;
}

/* The stream's UploadInfo (first message) into *info; its chunks appended to data. */
static int collect_upload(const uint8_t *req, size_t len,
                          Parca__Debuginfo__V1alpha1__UploadRequest **info, strata_buffer *data,
                          strata_error *err) {
    const uint8_t *p = req, *end = req + len, *msg;
    size_t msg_len;
    *info = NULL;
    while (rpc_stream_next(&p, end, &msg, &msg_len)) {
        Parca__Debuginfo__V1alpha1__UploadRequest *m =
            parca__debuginfo__v1alpha1__upload_request__unpack(NULL, msg_len, msg);
        if (m == NULL)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "cannot decode UploadRequest");
        if (*info == NULL) {
            if (m->data_case != P(UPLOAD_REQUEST__DATA_INFO) || m->info == NULL) {
                parca__debuginfo__v1alpha1__upload_request__free_unpacked(m, NULL);
                return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                        "the first UploadRequest must carry info");
            }
            *info = m;
            continue;
        }
        int rc = 0;
        if (m->data_case != P(UPLOAD_REQUEST__DATA_CHUNK_DATA))
            rc = strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                  "an UploadRequest after the first must carry chunk_data");
        else if (strata_buffer_append(data, m->chunk_data.data, m->chunk_data.len) != 0)
            rc = strata_error_oom(err);
        parca__debuginfo__v1alpha1__upload_request__free_unpacked(m, NULL);
        if (rc != 0)
            return -1;
    }
    if (*info == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "an empty upload stream");
    return 0;
}

static int upload(debuginfo_service *s, const char *tenant, const uint8_t *req, size_t len,
                  strata_buffer *resp, strata_error *err) {
    Parca__Debuginfo__V1alpha1__UploadRequest *first = NULL;
    strata_buffer data = STRATA_BUFFER_INIT;
    size_t files = 0;
    char key[KEY_BYTES];
    int rc = collect_upload(req, len, &first, &data, err);
    const Parca__Debuginfo__V1alpha1__UploadInfo *info = rc == 0 ? first->info : NULL;
    if (rc == 0)
        rc = debuginfo_check_build_id(info->build_id, err);
    if (rc == 0)
        rc = refuse_type(info->type, err);
    if (rc == 0)
        rc = source_archive_check(data.data, data.len, &files, err);
    if (rc == 0)
        rc = debuginfo_sources_key(tenant, info->build_id, key, sizeof key, err);
    if (rc == 0)
        rc = bucket_upload(s->store, key, data.data, data.len, err);
    if (rc == 0) {
        metrics_counter_add(s->uploaded_bytes, (int64_t)data.len);
        strata_log_info("debuginfo", "sources uploaded",
                        "tenant=%s build_id=%s bytes=%zu files=%zu", tenant, info->build_id,
                        data.len, files);
        Parca__Debuginfo__V1alpha1__UploadResponse out =
            PARCA__DEBUGINFO__V1ALPHA1__UPLOAD_RESPONSE__INIT;
        out.build_id = info->build_id;
        out.size = data.len;
        rc = pack(&out.base, resp, err);
    }
    if (first != NULL)
        parca__debuginfo__v1alpha1__upload_request__free_unpacked(first, NULL);
    strata_buffer_free(&data);
    return rc;
}

static int mark_finished(debuginfo_service *s, const char *tenant, const uint8_t *req, size_t len,
                         strata_buffer *resp, strata_error *err) {
    Parca__Debuginfo__V1alpha1__MarkUploadFinishedRequest *r =
        parca__debuginfo__v1alpha1__mark_upload_finished_request__unpack(NULL, len, req);
    if (r == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "cannot decode MarkUploadFinishedRequest");
    bool exists = false;
    int rc = debuginfo_check_build_id(r->build_id, err);
    if (rc == 0)
        rc = refuse_type(r->type, err);
    if (rc == 0)
        rc = sources_exist(s, tenant, r->build_id, &exists, err);
    if (rc == 0 && !exists)
        rc = strata_error_set(err, STRATA_NOT_FOUND, "no sources were uploaded for build id %s",
                              r->build_id);
    if (rc == 0) {
        Parca__Debuginfo__V1alpha1__MarkUploadFinishedResponse out =
            PARCA__DEBUGINFO__V1ALPHA1__MARK_UPLOAD_FINISHED_RESPONSE__INIT;
        rc = pack(&out.base, resp, err);
    }
    parca__debuginfo__v1alpha1__mark_upload_finished_request__free_unpacked(r, NULL);
    return rc;
}

/* ---- jobs ---- */

static void *run_job(void *arg) {
    job *j = arg;
    debuginfo_service *s = j->svc;
    strata_error err;
    strata_error_clear(&err);
    strata_buffer resp = STRATA_BUFFER_INIT;
    strata_tenant tenant;
    const char *value = NULL;
    size_t vlen = 0;
    if (!rpc_call_metadata(j->call, STRATA_TENANT_HEADER, &value, &vlen))
        value = NULL;
    int rc = strata_tenant_from_header(value, vlen, &tenant, &err);
    if (rc == 0)
        rc = j->fn(s, tenant.name, j->req, j->len, &resp, &err);
    const char *labels[2] = {j->method, rc == 0 ? "ok" : strata_status_name(err.code)};
    metrics_counter_inc(metrics_counter_vec_with(s->calls, labels));
    if (rc != 0) {
        char quoted[600];
        strata_log_warn("debuginfo", "call refused", "method=%s code=%s peer=%s error=%s",
                        j->method, strata_status_name(err.code), rpc_call_peer(j->call),
                        strata_log_quote(err.message, quoted, sizeof quoted));
    }
    if (rc == 0)
        rpc_call_finish_buffer(j->call, STRATA_OK, NULL, &resp);
    else
        rpc_call_finish(j->call, err.code == STRATA_OK ? STRATA_UNKNOWN : err.code, err.message,
                        NULL, 0);
    strata_buffer_free(&resp);
    free(j);
    pthread_mutex_lock(&s->lock);
    if (--s->in_flight == 0)
        pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static void start_job(rpc_call *call, const uint8_t *req, size_t len, debuginfo_service *s,
                      job_fn fn, const char *method) {
    pthread_mutex_lock(&s->lock);
    bool admitted = s->in_flight < DEBUGINFO_MAX_CALLS_IN_FLIGHT;
    if (admitted)
        s->in_flight++;
    pthread_mutex_unlock(&s->lock);
    if (!admitted) {
        rpc_call_finish(call, STRATA_RESOURCE_EXHAUSTED,
                        "too many debuginfo calls in flight: retry later", NULL, 0);
        return;
    }
    job *j = malloc(sizeof *j);
    pthread_attr_t attr;
    pthread_t thread;
    bool started = false;
    if (j != NULL && pthread_attr_init(&attr) == 0) {
        *j = (job){s, call, req, len, fn, method};
        started = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
                  pthread_create(&thread, &attr, run_job, j) == 0;
        pthread_attr_destroy(&attr);
    }
    if (started)
        return;
    free(j);
    rpc_call_finish(call, STRATA_RESOURCE_EXHAUSTED, "cannot start a debuginfo job", NULL, 0);
    pthread_mutex_lock(&s->lock);
    if (--s->in_flight == 0)
        pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->lock);
}

#define HANDLER(name, fn)                                                                          \
    static void name(rpc_call *call, const uint8_t *req, size_t len, void *arg) {                  \
        start_job(call, req, len, arg, fn, #fn);                                                   \
    }
HANDLER(handle_should_initiate, should_initiate)
HANDLER(handle_initiate, initiate)
HANDLER(handle_upload, upload)
HANDLER(handle_mark_finished, mark_finished)
#undef HANDLER

int debuginfo_service_new(bucket *store, uint64_t max_upload_bytes, metrics_registry *registry,
                          debuginfo_service **out, strata_error *err) {
    if (max_upload_bytes == 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "debuginfo: max_source_upload_bytes must be positive");
    debuginfo_service *s = calloc(1, sizeof *s);
    if (s == NULL)
        return strata_error_oom(err);
    s->store = store;
    s->max_upload_bytes = max_upload_bytes;
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        free(s);
        return strata_error_set(err, STRATA_INTERNAL, "debuginfo: pthread_mutex_init failed");
    }
    if (pthread_cond_init(&s->idle, NULL) != 0) {
        pthread_mutex_destroy(&s->lock);
        free(s);
        return strata_error_set(err, STRATA_INTERNAL, "debuginfo: pthread_cond_init failed");
    }
    static const char *const names[] = {"method", "result"};
    metrics_opts o = {.name = "strata_ingester_debuginfo_calls_total",
                      .help = "DebuginfoService calls, by method and result (ok or the status).",
                      .label_names = names,
                      .n_labels = 2};
    metrics_opts b = {.name = "strata_ingester_source_upload_bytes_total",
                      .help = "Bytes of source archives stored."};
    if ((s->calls = metrics_counter_vec_new(registry, &o, err)) == NULL ||
        (s->uploaded_bytes = metrics_counter_new(registry, &b, err)) == NULL) {
        debuginfo_service_free(s);
        return -1;
    }
    *out = s;
    return 0;
}

int debuginfo_service_register(debuginfo_service *s, rpc_server *server, strata_error *err) {
    /* the archive plus its framing (a few bytes per chunk of at least a KiB) */
    size_t stream_max = (size_t)s->max_upload_bytes + s->max_upload_bytes / 64 + 4096;
    if (rpc_server_add_method(server, DEBUGINFO_SERVICE "ShouldInitiateUpload",
                              handle_should_initiate, s, err) != 0 ||
        rpc_server_add_method(server, DEBUGINFO_SERVICE "InitiateUpload", handle_initiate, s,
                              err) != 0 ||
        rpc_server_add_method(server, DEBUGINFO_SERVICE "MarkUploadFinished", handle_mark_finished,
                              s, err) != 0)
        return -1;
    return rpc_server_add_client_stream_method(server, DEBUGINFO_SERVICE "Upload", handle_upload, s,
                                               stream_max, DEBUGINFO_MAX_UPLOADS_IN_FLIGHT, err);
}

void debuginfo_service_free(debuginfo_service *s) {
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->lock);
    while (s->in_flight > 0)
        pthread_cond_wait(&s->idle, &s->lock);
    pthread_mutex_unlock(&s->lock);
    pthread_cond_destroy(&s->idle);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
