/*
 * agents.c - see agents.h. A mutex-guarded array; agents are few (one per node), so linear search
 * is cheaper than anything cleverer.
 */
#include "agents.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/array.h"
#include "common/clock.h"
#include "json/json.h"
#include "parca/profilestore/v1alpha1/profilestore.pb-c.h"

typedef struct agent_entry {
    char *id;
    char *last_error;
    int64_t last_push_ns;
    int64_t last_push_duration_ns;
} agent_entry;

struct agent_registry {
    pthread_mutex_t mu;
    agent_entry *entries;
    size_t count;
    size_t cap;
};

int agent_registry_new(agent_registry **out, strata_error *err) {
    agent_registry *r = calloc(1, sizeof *r);
    if (r == NULL)
        return strata_error_oom(err);
    if (pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r);
        return strata_error_set(err, STRATA_INTERNAL, "cannot initialise agent registry lock");
    }
    *out = r;
    return 0;
}

static void entry_free(agent_entry *e) {
    free(e->id);
    free(e->last_error);
}

void agent_registry_free(agent_registry *r) {
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->count; i++)
        entry_free(&r->entries[i]);
    free(r->entries);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static agent_entry *find_or_add(agent_registry *r, const char *id, strata_error *err) {
    for (size_t i = 0; i < r->count; i++)
        if (strcmp(r->entries[i].id, id) == 0)
            return &r->entries[i];
    if (STRATA_ARRAY_RESERVE_OR_OOM(r->entries, r->cap, r->count + 1, err) != 0)
        return NULL;
    agent_entry *e = &r->entries[r->count];
    memset(e, 0, sizeof *e);
    if ((e->id = strdup(id)) == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    r->count++;
    return e;
}

int agent_registry_record(agent_registry *r, const char *node, const char *peer, int64_t now_ns,
                          int64_t duration_ns, const char *error_message, strata_error *err) {
    char id[512];
    if (node != NULL && node[0] != '\0')
        snprintf(id, sizeof id, "%s %s", node, peer != NULL ? peer : "");
    else
        snprintf(id, sizeof id, "%s", peer != NULL ? peer : "unknown");
    char *error_copy = strdup(error_message != NULL ? error_message : "");
    if (error_copy == NULL)
        return strata_error_oom(err);
    pthread_mutex_lock(&r->mu);
    agent_entry *e = find_or_add(r, id, err);
    if (e != NULL) {
        free(e->last_error);
        e->last_error = error_copy;
        e->last_push_ns = now_ns;
        e->last_push_duration_ns = duration_ns;
    }
    pthread_mutex_unlock(&r->mu);
    if (e == NULL) {
        free(error_copy);
        return -1;
    }
    return 0;
}

static void drop_idle(agent_registry *r, int64_t now_ns) {
    size_t kept = 0;
    for (size_t i = 0; i < r->count; i++) {
        if (now_ns - r->entries[i].last_push_ns > AGENT_IDLE_EXPIRY_NS) {
            entry_free(&r->entries[i]);
            continue;
        }
        r->entries[kept++] = r->entries[i];
    }
    r->count = kept;
}

static int compare_entries(const void *a, const void *b) {
    return strcmp(((const agent_entry *)a)->id, ((const agent_entry *)b)->id);
}

static int encode_entries(const agent_registry *r, strata_buffer *out, strata_error *err) {
    Parca__Profilestore__V1alpha1__AgentsResponse resp =
        PARCA__PROFILESTORE__V1ALPHA1__AGENTS_RESPONSE__INIT;
    Parca__Profilestore__V1alpha1__Agent *agents = calloc(r->count + 1, sizeof *agents);
    Parca__Profilestore__V1alpha1__Agent **ptrs = calloc(r->count + 1, sizeof *ptrs);
    Google__Protobuf__Timestamp *times = calloc(r->count + 1, sizeof *times);
    Google__Protobuf__Duration *durations = calloc(r->count + 1, sizeof *durations);
    int rc = -1;
    if (agents == NULL || ptrs == NULL || times == NULL || durations == NULL) {
        strata_error_oom(err);
        goto out;
    }
    for (size_t i = 0; i < r->count; i++) {
        const agent_entry *e = &r->entries[i];
        parca__profilestore__v1alpha1__agent__init(&agents[i]);
        google__protobuf__timestamp__init(&times[i]);
        google__protobuf__duration__init(&durations[i]);
        times[i].seconds = e->last_push_ns / STRATA_NS_PER_SEC;
        times[i].nanos = (int32_t)(e->last_push_ns % STRATA_NS_PER_SEC);
        durations[i].seconds = e->last_push_duration_ns / STRATA_NS_PER_SEC;
        durations[i].nanos = (int32_t)(e->last_push_duration_ns % STRATA_NS_PER_SEC);
        agents[i].id = e->id;
        agents[i].last_error = e->last_error;
        agents[i].last_push = &times[i];
        agents[i].last_push_duration = &durations[i];
        ptrs[i] = &agents[i];
    }
    resp.n_agents = r->count;
    resp.agents = ptrs;
    size_t size = parca__profilestore__v1alpha1__agents_response__get_packed_size(&resp);
    if (strata_buffer_reserve(out, size) != 0) {
        strata_error_oom(err);
        goto out;
    }
    out->len += parca__profilestore__v1alpha1__agents_response__pack(&resp, out->data + out->len);
    rc = 0;
out:
    free(agents);
    free(ptrs);
    free(times);
    free(durations);
    return rc;
}

int agent_registry_encode_response(agent_registry *r, int64_t now_ns, strata_buffer *out,
                                   strata_error *err) {
    pthread_mutex_lock(&r->mu);
    drop_idle(r, now_ns);
    if (r->count > 1) /* qsort of NULL, 0 is undefined: the registry starts empty */
        qsort(r->entries, r->count, sizeof *r->entries, compare_entries);
    int rc = encode_entries(r, out, err);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int agent_registry_encode_json(agent_registry *r, int64_t now_ns, strata_buffer *out,
                               strata_error *err) {
    json_writer w;
    json_writer_init(&w, out);
    pthread_mutex_lock(&r->mu);
    drop_idle(r, now_ns);
    if (r->count > 1) /* qsort of NULL, 0 is undefined: the registry starts empty */
        qsort(r->entries, r->count, sizeof *r->entries, compare_entries);
    json_begin_object(&w);
    json_key(&w, "agents");
    json_begin_array(&w);
    for (size_t i = 0; i < r->count; i++) {
        const agent_entry *e = &r->entries[i];
        json_begin_object(&w);
        json_key(&w, "id");
        json_string(&w, e->id);
        json_key(&w, "last_push");
        json_timestamp_ns(&w, e->last_push_ns);
        json_key(&w, "last_push_duration");
        json_duration_ns(&w, e->last_push_duration_ns);
        json_key(&w, "last_error");
        json_string(&w, e->last_error);
        json_end_object(&w);
    }
    json_end_array(&w);
    json_end_object(&w);
    pthread_mutex_unlock(&r->mu);
    return json_writer_finish(&w) == 0 ? 0 : strata_error_oom(err);
}
