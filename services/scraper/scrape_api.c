/*
 * scrape_api.c - ScrapeService/Targets on gRPC and GET /api/v1/targets; see scraper.h.
 *
 * The response is written straight to protobuf wire format (and to protojson) from the target
 * list under the scraper's lock, instead of building a protobuf-c message tree: with thousands of
 * targets that tree would be tens of thousands of small allocations per call.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/protobuf_writer.h"
#include "common/tenant.h"
#include "json/json.h"
#include "parca/scrape/v1alpha1/scrape.pb-c.h"
#include "scraper_internal.h"

/* ---- protobuf wire format -------------------------------------------------------------------- */

static int put_string(strata_buffer *b, unsigned field, const char *s) {
    return s[0] == '\0' ? 0 : strata_pb_append_len_field(b, field, s, strlen(s));
}

/* Appends field as a nested message whose bytes are in inner. */
static int put_message(strata_buffer *b, unsigned field, const strata_buffer *inner) {
    return strata_pb_append_len_field(b, field, inner->data, inner->len);
}

static int put_label_set(strata_buffer *b, unsigned field, const label_set *ls) {
    strata_buffer set = STRATA_BUFFER_INIT, label = STRATA_BUFFER_INIT;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < ls->count; i++) {
        strata_buffer_reset(&label);
        if ((rc = put_string(&label, 1, ls->labels[i].name)) == 0 &&
            (rc = put_string(&label, 2, ls->labels[i].value)) == 0)
            rc = put_message(&set, 1, &label);
    }
    if (rc == 0)
        rc = put_message(b, field, &set);
    strata_buffer_free(&set);
    strata_buffer_free(&label);
    return rc;
}

/* google.protobuf.Timestamp / Duration: seconds=1, nanos=2. */
static int put_seconds_nanos(strata_buffer *b, unsigned field, int64_t ns) {
    strata_buffer inner = STRATA_BUFFER_INIT;
    int rc = strata_pb_append_varint_field(&inner, 1, (uint64_t)(ns / STRATA_NS_PER_SEC));
    if (rc == 0)
        rc = strata_pb_append_varint_field(&inner, 2, (uint64_t)(ns % STRATA_NS_PER_SEC));
    if (rc == 0)
        rc = put_message(b, field, &inner);
    strata_buffer_free(&inner);
    return rc;
}

static int put_target(strata_buffer *b, const scrape_target *t) {
    strata_buffer inner = STRATA_BUFFER_INIT;
    int rc = put_label_set(&inner, 1, &t->discovered);
    if (rc == 0)
        rc = put_label_set(&inner, 2, &t->labels);
    if (rc == 0)
        rc = put_string(&inner, 3, t->last_error);
    if (rc == 0 && t->last_scrape_ns != 0)
        rc = put_seconds_nanos(&inner, 4, t->last_scrape_ns);
    if (rc == 0 && t->last_scrape_ns != 0)
        rc = put_seconds_nanos(&inner, 5, t->last_duration_ns);
    if (rc == 0)
        rc = put_string(&inner, 6, t->url);
    if (rc == 0)
        rc = strata_pb_append_varint_field(&inner, 7, (uint64_t)t->health);
    if (rc == 0)
        rc = put_message(b, 1, &inner);
    strata_buffer_free(&inner);
    return rc;
}

static int put_dropped(strata_buffer *b, const label_set *discovered) {
    strata_buffer inner = STRATA_BUFFER_INIT;
    int rc = put_label_set(&inner, 1, discovered);
    if (rc == 0)
        rc = put_message(b, 1, &inner);
    strata_buffer_free(&inner);
    return rc;
}

static int put_job(strata_buffer *b, const scrape_job *job, scrape_state_filter state) {
    strata_buffer targets = STRATA_BUFFER_INIT, entry = STRATA_BUFFER_INIT;
    int rc = 0;
    if (state != SCRAPE_STATE_DROPPED)
        for (size_t i = 0; rc == 0 && i < job->n_targets; i++)
            rc = put_target(&targets, job->targets[i]);
    if (state != SCRAPE_STATE_ACTIVE)
        for (size_t i = 0; rc == 0 && i < job->n_dropped; i++)
            rc = put_dropped(&targets, &job->dropped[i]);
    if (rc == 0 && (rc = put_string(&entry, 1, job->config.job_name)) == 0 &&
        (rc = put_message(&entry, 2, &targets)) == 0)
        rc = put_message(b, 1, &entry);
    strata_buffer_free(&targets);
    strata_buffer_free(&entry);
    return rc;
}

int scraper_targets_proto(scraper *s, scrape_state_filter state, strata_buffer *out,
                          strata_error *err) {
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    for (size_t j = 0; rc == 0 && j < s->n_jobs; j++)
        rc = put_job(out, s->jobs[j], state);
    pthread_mutex_unlock(&s->mu);
    return rc == 0 ? 0 : strata_error_oom(err);
}

/* ---- protojson ------------------------------------------------------------------------------- */

static void json_label_set(json_writer *w, const char *key, const label_set *ls) {
    json_key(w, key);
    json_begin_object(w);
    json_key(w, "labels");
    json_begin_array(w);
    for (size_t i = 0; i < ls->count; i++) {
        json_begin_object(w);
        json_key(w, "name");
        json_string(w, ls->labels[i].name);
        json_key(w, "value");
        json_string(w, ls->labels[i].value);
        json_end_object(w);
    }
    json_end_array(w);
    json_end_object(w);
}

static const char *health_name(scrape_health h) {
    switch (h) {
        case SCRAPE_HEALTH_GOOD:
            return "HEALTH_GOOD";
        case SCRAPE_HEALTH_BAD:
            return "HEALTH_BAD";
        default:
            return "HEALTH_UNKNOWN_UNSPECIFIED";
    }
}

static void json_target(json_writer *w, const scrape_target *t) {
    json_begin_object(w);
    json_label_set(w, "discoveredLabels", &t->discovered);
    json_label_set(w, "labels", &t->labels);
    json_key(w, "lastError");
    json_string(w, t->last_error);
    if (t->last_scrape_ns != 0) {
        json_key(w, "lastScrape");
        json_timestamp_ns(w, t->last_scrape_ns);
        json_key(w, "lastScrapeDuration");
        json_duration_ns(w, t->last_duration_ns);
    }
    json_key(w, "url");
    json_string(w, t->url);
    json_key(w, "health");
    json_string(w, health_name(t->health));
    json_end_object(w);
}

static void json_dropped(json_writer *w, const label_set *discovered) {
    static const label_set empty = LABEL_SET_INIT;
    json_begin_object(w);
    json_label_set(w, "discoveredLabels", discovered);
    json_label_set(w, "labels", &empty);
    json_key(w, "lastError");
    json_string(w, "");
    json_key(w, "url");
    json_string(w, "");
    json_key(w, "health");
    json_string(w, health_name(SCRAPE_HEALTH_UNKNOWN));
    json_end_object(w);
}

int scraper_targets_json(scraper *s, scrape_state_filter state, strata_buffer *out,
                         strata_error *err) {
    json_writer w;
    json_writer_init(&w, out);
    json_begin_object(&w);
    json_key(&w, "targets");
    json_begin_object(&w);
    pthread_mutex_lock(&s->mu);
    for (size_t j = 0; j < s->n_jobs; j++) {
        const scrape_job *job = s->jobs[j];
        json_key(&w, job->config.job_name);
        json_begin_object(&w);
        json_key(&w, "targets");
        json_begin_array(&w);
        if (state != SCRAPE_STATE_DROPPED)
            for (size_t i = 0; i < job->n_targets; i++)
                json_target(&w, job->targets[i]);
        if (state != SCRAPE_STATE_ACTIVE)
            for (size_t i = 0; i < job->n_dropped; i++)
                json_dropped(&w, &job->dropped[i]);
        json_end_array(&w);
        json_end_object(&w);
    }
    pthread_mutex_unlock(&s->mu);
    json_end_object(&w);
    json_end_object(&w);
    return json_writer_finish(&w) == 0 ? 0 : strata_error_oom(err);
}

/* ---- handlers -------------------------------------------------------------------------------- */

/* Targets are not per tenant, but a call naming a tenant that common/tenant.h's rule refuses is
 * refused here as on every API (INVALID_ARGUMENT, HTTP 400). */
static int grpc_targets(rpc_call *call, const uint8_t *request, size_t request_len,
                        strata_buffer *response, strata_error *err, void *arg) {
    const char *tenant_value = NULL;
    size_t tenant_len = 0;
    strata_tenant tenant;
    if (!rpc_call_metadata(call, STRATA_TENANT_HEADER, &tenant_value, &tenant_len))
        tenant_value = NULL;
    if (strata_tenant_from_header(tenant_value, tenant_len, &tenant, err) != 0)
        return -1;
    Parca__Scrape__V1alpha1__TargetsRequest *req =
        parca__scrape__v1alpha1__targets_request__unpack(NULL, request_len, request);
    if (req == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "malformed TargetsRequest");
    scrape_state_filter state = (scrape_state_filter)req->state;
    parca__scrape__v1alpha1__targets_request__free_unpacked(req, NULL);
    if (state != SCRAPE_STATE_ANY && state != SCRAPE_STATE_ACTIVE && state != SCRAPE_STATE_DROPPED)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "unknown state %d", (int)state);
    return scraper_targets_proto(arg, state, response, err);
}

static void http_targets(void *ctx, const http_request *req, http_response *resp) {
    strata_error err;
    strata_tenant tenant;
    const char *tenant_value = http_request_header(req, STRATA_TENANT_HTTP_HEADER);
    if (strata_tenant_from_header(tenant_value, tenant_value != NULL ? strlen(tenant_value) : 0,
                                  &tenant, &err) != 0) {
        http_response_strata_error(resp, req, &err);
        return;
    }
    const char *state_text = http_request_query(req, "state");
    scrape_state_filter state = SCRAPE_STATE_ANY;
    if (state_text != NULL && strcmp(state_text, "active") == 0)
        state = SCRAPE_STATE_ACTIVE;
    else if (state_text != NULL && strcmp(state_text, "dropped") == 0)
        state = SCRAPE_STATE_DROPPED;
    else if (state_text != NULL && state_text[0] != '\0' && strcmp(state_text, "any") != 0) {
        http_response_error(resp, req, 400, "state: want any, active or dropped");
        return;
    }
    if (scraper_targets_json(ctx, state, http_response_body(resp), &err) != 0) {
        http_response_strata_error(resp, req, &err);
        return;
    }
    http_response_set_content_type(resp, "application/json");
}

int scraper_register_grpc(scraper *s, rpc_server *server, strata_error *err) {
    return rpc_server_add_sync_method(server, SCRAPER_TARGETS_METHOD, grpc_targets, s, err);
}

int scraper_register_http(scraper *s, http_server *server, strata_error *err) {
    return http_server_route(server, "GET", SCRAPER_TARGETS_PATH, HTTP_MATCH_EXACT, http_targets, s,
                             err);
}
