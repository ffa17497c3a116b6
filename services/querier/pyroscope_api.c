/*
 * pyroscope_api.c - Grafana Pyroscope's querier.v1.QuerierService (proto/querier/v1/querier.proto)
 * over the same engine as Parca's QueryService, for Grafana's Pyroscope data source and the
 * Explore Profiles app (Connect, both codecs, through lib/rpcweb; gRPC too).
 *
 * Translation, not a second engine:
 *   - Profile types. Pyroscope names a type by five parts (`process_cpu:cpu:nanoseconds:cpu:
 *     nanoseconds`); Strata keeps Parca's sixth, `delta`. A Pyroscope ID is resolved to the
 *     stored type with those five parts among the types with data in the request's window (the
 *     delta one when both exist); none means an empty answer, as Pyroscope gives for a type it has
 *     no data of.
 *   - Matchers. Pyroscope's selectors may hold `__profile_type__` (a type ID) and `__name__`
 *     matchers, which are conditions on the type, not on series labels: they are taken out of the
 *     selector and decide which types a call covers; the rest are ordinary label matchers.
 *   - Times are unix milliseconds; 0 means unbounded for types and labels. Series (label sets)
 *     read a range query, which needs a window: 0 there means the last 24 hours.
 *   - SelectMergeStacktraces and Diff build the tree as Parca's Query does (grouped by function
 *     name) and lay it out as Pyroscope's flame graph levels (calltree_encode_pyroscope_flamegraph,
 *     the layout of the web UI's flamebearer); Diff's left is the baseline. SelectMergeProfile is
 *     PPROF's exact tree as a plain pprof. SelectSeries is QueryRange regrouped by group_by: one
 *     series per group_by value set, all series summed when group_by is empty, every profile in
 *     a step summed (or averaged per profile), gauges too (query_range_summed: Parca's QueryRange
 *     keeps a gauge's earliest profile per step and every series).
 *   - SelectMergeSpanProfile is SelectMergeStacktraces with one more matcher, on the pprof sample
 *     label span_id (what OpenTelemetry's profiling integrations attach): span_id=~"id1|id2|...",
 *     which the engine applies to samples, as any matcher naming a sample label.
 * stack_trace_selector (call-site prefixes, Go PGO) is not supported: INVALID_ARGUMENT says so.
 */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/clock.h"
#include "common/protobuf_writer.h"
#include "labels/labels.h"
#include "perftools/profiles/profile.pb-c.h"
#include "querier/v1/querier.pb-c.h"
#include "querier_internal.h"

#define QUERIER_V1 "/querier.v1.QuerierService/"
#define NS_PER_MS 1000000LL
#define SERIES_DEFAULT_WINDOW_NS (24LL * 3600 * STRATA_NS_PER_SEC)
#define TYPE_LABEL "__profile_type__"
#define NAME_LABEL "__name__"

typedef Querier__V1__LabelPair label_pair_pb;

static int64_t ms_to_ns(int64_t ms, int64_t when_zero) {
    if (ms == 0)
        return when_zero;
    if (ms > INT64_MAX / NS_PER_MS)
        return INT64_MAX;
    if (ms < INT64_MIN / NS_PER_MS)
        return INT64_MIN;
    return ms * NS_PER_MS;
}

/* ---- profile types ------------------------------------------------------------------------- */

/* Pyroscope's ID of a type: its five parts. */
static int type_id(const profile_type *t, strata_buffer *out) {
    return strata_buffer_appendf(out, "%s:%s:%s:%s:%s", t->name, t->sample_type, t->sample_unit,
                                 t->period_type, t->period_unit);
}

static bool same_five_parts(const profile_type *a, const profile_type *b) {
    return strcmp(a->name, b->name) == 0 && strcmp(a->sample_type, b->sample_type) == 0 &&
           strcmp(a->sample_unit, b->sample_unit) == 0 &&
           strcmp(a->period_type, b->period_type) == 0 &&
           strcmp(a->period_unit, b->period_unit) == 0;
}

/* The types with data in [from, to]. */
typedef struct type_list {
    profile_type *types;
    size_t n;
} type_list;

static int list_types(querier *q, const char *tenant, int64_t from, int64_t to, type_list *out,
                      strata_error *err) {
    return query_profile_types(q->engine, tenant, from, to, &out->types, &out->n, err);
}

static void type_list_free(type_list *l) {
    query_profile_types_free(l->types, l->n);
}

/* The stored type a Pyroscope ID names (the delta one when both exist), or NULL. */
static const profile_type *resolve_type(const type_list *types, const char *id, strata_error *err,
                                        int *rc) {
    profile_type want;
    *rc = 0;
    if (profile_type_parse(id, strlen(id), &want, err) != 0) {
        *rc = strata_error_wrap(err, "profile_typeID");
        return NULL;
    }
    const profile_type *found = NULL;
    for (size_t i = 0; i < types->n; i++)
        if (same_five_parts(&types->types[i], &want) && (found == NULL || types->types[i].delta))
            found = &types->types[i];
    profile_type_free(&want);
    return found;
}

/* ---- selectors with type conditions -------------------------------------------------------- */

/* A parsed selector whose __profile_type__ and __name__ matchers are moved to its end and not
 * counted in sel.n_matchers (restored before it is freed). */
typedef struct split_selector {
    selector sel;
    size_t n_type_matchers;
} split_selector;

static bool is_type_matcher(const label_matcher *m) {
    return strcmp(m->name, TYPE_LABEL) == 0 || strcmp(m->name, NAME_LABEL) == 0;
}

static int split_parse(const char *text, split_selector *out, strata_error *err) {
    memset(out, 0, sizeof *out);
    if (selector_parse(text, &out->sel, err) != 0)
        return -1;
    if (out->sel.has_profile_type)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "selector \"%.64s\": name the type with profile_typeID or a "
                                "__profile_type__ matcher",
                                text);
    label_matcher *m = out->sel.matchers;
    size_t n = out->sel.n_matchers, keep = 0;
    for (size_t i = 0; i < n; i++)
        if (!is_type_matcher(&m[i])) {
            label_matcher t = m[keep];
            m[keep++] = m[i];
            m[i] = t;
        }
    out->sel.n_matchers = keep;
    out->n_type_matchers = n - keep;
    return 0;
}

static void split_free(split_selector *s) {
    s->sel.n_matchers += s->n_type_matchers;
    selector_free(&s->sel);
}

/* True when t meets s's type conditions. */
static bool admits_type(const split_selector *s, const profile_type *t) {
    strata_buffer id = STRATA_BUFFER_INIT;
    bool ok = type_id(t, &id) == 0 && strata_buffer_append_byte(&id, 0) == 0;
    for (size_t i = 0; ok && i < s->n_type_matchers; i++) {
        const label_matcher *m = &s->sel.matchers[s->sel.n_matchers + i];
        ok = label_matcher_matches(m, strcmp(m->name, TYPE_LABEL) == 0 ? (const char *)id.data
                                                                       : t->name);
    }
    strata_buffer_free(&id);
    return ok;
}

/* The request's matchers (none: everything), each split. */
typedef struct matcher_set {
    split_selector *sels;
    size_t n;
} matcher_set;

static void matcher_set_free(matcher_set *m) {
    for (size_t i = 0; i < m->n; i++)
        split_free(&m->sels[i]);
    free(m->sels);
}

static int parse_matcher_set(char **texts, size_t n, matcher_set *out, strata_error *err) {
    out->n = 0;
    out->sels = calloc(n > 0 ? n : 1, sizeof *out->sels);
    if (out->sels == NULL)
        return strata_error_oom(err);
    const char *all = "{}";
    for (size_t i = 0; i < (n > 0 ? n : 1); i++) {
        if (split_parse(n > 0 ? texts[i] : all, &out->sels[i], err) != 0) {
            matcher_set_free(out);
            return strata_error_wrap(err, "matchers[%zu]", i);
        }
        out->n++;
    }
    return 0;
}

/* ---- string lists -----------------------------------------------------------------------------
 */

typedef struct string_list {
    char **items;
    size_t n, cap;
} string_list;

static void string_list_free(string_list *l) {
    for (size_t i = 0; i < l->n; i++)
        free(l->items[i]);
    free(l->items);
}

static int string_list_add(string_list *l, const char *s, strata_error *err) {
    if (STRATA_ARRAY_RESERVE_OR_OOM(l->items, l->cap, l->n + 1, err) != 0)
        return -1;
    if ((l->items[l->n] = strdup(s)) == NULL)
        return strata_error_oom(err);
    l->n++;
    return 0;
}

static int compare_strings(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorts and removes duplicates. */
static void string_list_unique(string_list *l) {
    if (l->n == 0)
        return;
    qsort(l->items, l->n, sizeof *l->items, compare_strings);
    size_t k = 1;
    for (size_t i = 1; i < l->n; i++) {
        if (strcmp(l->items[i], l->items[k - 1]) == 0)
            free(l->items[i]);
        else
            l->items[k++] = l->items[i];
    }
    l->n = k;
}

/* ---- ProfileTypes -------------------------------------------------------------------------- */

static int handle_profile_types(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                                strata_error *err, void *arg) {
    querier *q = arg;
    int64_t start = strata_monotonic_ns();
    strata_tenant tenant;
    if (querier_call_tenant(call, &tenant, err) != 0)
        return -1;
    Querier__V1__ProfileTypesRequest *r =
        querier__v1__profile_types_request__unpack(NULL, len, req);
    if (r == NULL)
        return querier_bad_request(err, "ProfileTypesRequest");
    type_list types = {0};
    int rc = list_types(q, tenant.name, ms_to_ns(r->start, INT64_MIN), ms_to_ns(r->end, INT64_MAX),
                        &types, err);
    querier__v1__profile_types_request__free_unpacked(r, NULL);
    Querier__V1__ProfileType *pts = calloc(types.n + 1, sizeof *pts);
    Querier__V1__ProfileType **ptrs = calloc(types.n + 1, sizeof *ptrs);
    strata_buffer *ids = calloc(types.n + 1, sizeof *ids);
    if (rc == 0 && (pts == NULL || ptrs == NULL || ids == NULL))
        rc = strata_error_oom(err);
    size_t n = 0;
    for (size_t i = 0; rc == 0 && i < types.n; i++) {
        const profile_type *t = &types.types[i];
        bool seen = false; /* delta and not: one Pyroscope type */
        for (size_t k = 0; k < i && !seen; k++)
            seen = same_five_parts(t, &types.types[k]);
        if (seen)
            continue;
        if (type_id(t, &ids[n]) != 0 || strata_buffer_append_byte(&ids[n], 0) != 0) {
            rc = strata_error_oom(err);
            break;
        }
        querier__v1__profile_type__init(&pts[n]);
        pts[n].id = (char *)ids[n].data;
        pts[n].name = t->name;
        pts[n].sample_type = t->sample_type;
        pts[n].sample_unit = t->sample_unit;
        pts[n].period_type = t->period_type;
        pts[n].period_unit = t->period_unit;
        ptrs[n] = &pts[n];
        n++;
    }
    if (rc == 0) {
        Querier__V1__ProfileTypesResponse out = QUERIER__V1__PROFILE_TYPES_RESPONSE__INIT;
        out.profile_types = ptrs;
        out.n_profile_types = n;
        rc = querier_pack(&out.base, resp, err);
    }
    for (size_t i = 0; ids != NULL && i < types.n; i++)
        strata_buffer_free(&ids[i]);
    free(ids);
    free(pts);
    free(ptrs);
    type_list_free(&types);
    querier_observe(q, "pyroscope_profile_types", rc == 0 ? STRATA_OK : err->code, start);
    return rc;
}

/* ---- LabelNames and LabelValues ------------------------------------------------------------ */

/* The values of the type pseudo-label name (__profile_type__ or __name__) among types. */
static int type_label_values(const type_list *types, const matcher_set *ms, const char *name,
                             string_list *out, strata_error *err) {
    for (size_t i = 0; i < types->n; i++) {
        const profile_type *t = &types->types[i];
        bool admitted = false;
        for (size_t s = 0; s < ms->n && !admitted; s++)
            admitted = admits_type(&ms->sels[s], t);
        if (!admitted)
            continue;
        strata_buffer id = STRATA_BUFFER_INIT;
        int rc = strcmp(name, TYPE_LABEL) == 0
                     ? (type_id(t, &id) != 0 || strata_buffer_append_byte(&id, 0) != 0
                            ? strata_error_oom(err)
                            : string_list_add(out, (const char *)id.data, err))
                     : string_list_add(out, t->name, err);
        strata_buffer_free(&id);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* Label names (name NULL) or values of name over the series the matchers select. */
static int run_labels(querier *q, const char *tenant, const matcher_set *ms, const char *name,
                      int64_t from, int64_t to, string_list *out, strata_error *err) {
    type_list types = {0};
    int rc = list_types(q, tenant, from, to, &types, err);
    if (rc == 0 && name != NULL && (strcmp(name, TYPE_LABEL) == 0 || strcmp(name, NAME_LABEL) == 0))
        rc = type_label_values(&types, ms, name, out, err);
    else if (rc == 0 && name == NULL &&
             (string_list_add(out, NAME_LABEL, err) != 0 ||
              string_list_add(out, TYPE_LABEL, err) != 0))
        rc = -1;
    for (size_t s = 0; rc == 0 && s < ms->n && (name == NULL || name[0] != '_' || name[1] != '_');
         s++) {
        const split_selector *sp = &ms->sels[s];
        for (size_t i = 0; rc == 0 && i < types.n; i++) {
            if (!admits_type(sp, &types.types[i]))
                continue;
            char **found = NULL;
            size_t n = 0;
            rc = query_labels(q->engine, tenant, name, &sp->sel, 1, &types.types[i], from, to,
                              &found, &n, err);
            for (size_t k = 0; rc == 0 && k < n; k++)
                rc = string_list_add(out, found[k], err);
            query_strings_free(found, n);
        }
    }
    type_list_free(&types);
    string_list_unique(out);
    return rc;
}

static int answer_names(const string_list *l, bool values, strata_buffer *resp, strata_error *err) {
    if (values) {
        Querier__V1__LabelValuesResponse out = QUERIER__V1__LABEL_VALUES_RESPONSE__INIT;
        out.names = l->items;
        out.n_names = l->n;
        return querier_pack(&out.base, resp, err);
    }
    Querier__V1__LabelNamesResponse out = QUERIER__V1__LABEL_NAMES_RESPONSE__INIT;
    out.names = l->items;
    out.n_names = l->n;
    return querier_pack(&out.base, resp, err);
}

static int handle_label_names(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                              strata_error *err, void *arg) {
    querier *q = arg;
    int64_t start = strata_monotonic_ns();
    strata_tenant tenant;
    if (querier_call_tenant(call, &tenant, err) != 0)
        return -1;
    Querier__V1__LabelNamesRequest *r = querier__v1__label_names_request__unpack(NULL, len, req);
    if (r == NULL)
        return querier_bad_request(err, "LabelNamesRequest");
    matcher_set ms = {0};
    string_list names = {0};
    int rc = parse_matcher_set(r->matchers, r->n_matchers, &ms, err);
    if (rc == 0)
        rc = run_labels(q, tenant.name, &ms, NULL, ms_to_ns(r->start, INT64_MIN),
                        ms_to_ns(r->end, INT64_MAX), &names, err);
    if (rc == 0)
        rc = answer_names(&names, false, resp, err);
    if (ms.sels != NULL)
        matcher_set_free(&ms);
    string_list_free(&names);
    querier__v1__label_names_request__free_unpacked(r, NULL);
    querier_observe(q, "pyroscope_label_names", rc == 0 ? STRATA_OK : err->code, start);
    return rc;
}

static int handle_label_values(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                               strata_error *err, void *arg) {
    querier *q = arg;
    int64_t start = strata_monotonic_ns();
    strata_tenant tenant;
    if (querier_call_tenant(call, &tenant, err) != 0)
        return -1;
    Querier__V1__LabelValuesRequest *r = querier__v1__label_values_request__unpack(NULL, len, req);
    if (r == NULL)
        return querier_bad_request(err, "LabelValuesRequest");
    matcher_set ms = {0};
    string_list values = {0};
    int rc = 0;
    if (!label_name_is_valid(r->name, strlen(r->name)))
        rc = strata_error_set(err, STRATA_INVALID_ARGUMENT, "name \"%.64s\" is not a label name",
                              r->name);
    if (rc == 0)
        rc = parse_matcher_set(r->matchers, r->n_matchers, &ms, err);
    if (rc == 0)
        rc = run_labels(q, tenant.name, &ms, r->name, ms_to_ns(r->start, INT64_MIN),
                        ms_to_ns(r->end, INT64_MAX), &values, err);
    if (rc == 0)
        rc = answer_names(&values, true, resp, err);
    if (ms.sels != NULL)
        matcher_set_free(&ms);
    string_list_free(&values);
    querier__v1__label_values_request__free_unpacked(r, NULL);
    querier_observe(q, "pyroscope_label_values", rc == 0 ? STRATA_OK : err->code, start);
    return rc;
}

/* ---- merges: flame graphs, pprof, diff ------------------------------------------------------ */

/* A Pyroscope merge request's parts. */
typedef struct merge_args {
    const char *type_id;
    const char *label_selector;
    int64_t start_ms, end_ms;
    bool has_stack_selector;
    char **span_ids; /* SelectMergeSpanProfile: only samples of these spans */
    size_t n_span_ids;
} merge_args;

#define SPAN_LABEL "span_id"
#define MAX_SPAN_ID 64

/* Adds span_id=~"id|id|..." to s (ids hex, lower-cased, so nothing in them is a regex
 * operator). */
static int add_span_matcher(split_selector *s, char *const *ids, size_t n, strata_error *err) {
    strata_buffer re = STRATA_BUFFER_INIT;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(ids[i]);
        if (len == 0 || len > MAX_SPAN_ID || strspn(ids[i], "0123456789abcdefABCDEF") != len) {
            strata_buffer_free(&re);
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "span_selector[%zu] \"%.64s\" is not a hex span ID", i, ids[i]);
        }
        if (i > 0 && strata_buffer_append_byte(&re, '|') != 0) {
            strata_buffer_free(&re);
            return strata_error_oom(err);
        }
        for (size_t k = 0; k < len; k++) /* OpenTelemetry writes IDs in lower case */
            if (strata_buffer_append_byte(&re, (uint8_t)tolower((unsigned char)ids[i][k])) != 0) {
                strata_buffer_free(&re);
                return strata_error_oom(err);
            }
    }
    size_t total = s->sel.n_matchers + s->n_type_matchers;
    label_matcher *grown = strata_array_resize(s->sel.matchers, total + 1, sizeof *grown);
    if (grown == NULL || strata_buffer_append_byte(&re, 0) != 0) {
        if (grown != NULL)
            s->sel.matchers = grown;
        strata_buffer_free(&re);
        return strata_error_oom(err);
    }
    s->sel.matchers = grown;
    /* the type matchers stay last, beyond n_matchers */
    memmove(&grown[s->sel.n_matchers + 1], &grown[s->sel.n_matchers],
            s->n_type_matchers * sizeof *grown);
    int rc = label_matcher_init(&grown[s->sel.n_matchers], SPAN_LABEL, LABEL_MATCH_REGEX,
                                (const char *)re.data, err);
    if (rc != 0)
        memmove(&grown[s->sel.n_matchers], &grown[s->sel.n_matchers + 1],
                s->n_type_matchers * sizeof *grown);
    else
        s->sel.n_matchers++;
    strata_buffer_free(&re);
    return rc;
}

/* The Parca query text for a merge: the resolved type and the selector's label matchers.
 * *found is false (and nothing written) when the window holds no data of the type. */
static int merge_query(querier *q, const char *tenant, const merge_args *a, int64_t from,
                       int64_t to, strata_buffer *text, bool *found, strata_error *err) {
    *found = false;
    if (a->has_stack_selector)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "stack_trace_selector is not supported by Strata");
    type_list types = {0};
    split_selector s;
    int rc = list_types(q, tenant, from, to, &types, err);
    if (rc != 0)
        return -1;
    if ((rc = split_parse(a->label_selector, &s, err)) == 0) {
        const profile_type *t = resolve_type(&types, a->type_id, err, &rc);
        if (t != NULL && a->n_span_ids > 0 &&
            add_span_matcher(&s, a->span_ids, a->n_span_ids, err) != 0) {
            rc = -1;
            t = NULL;
        }
        if (t != NULL && admits_type(&s, t)) {
            s.sel.has_profile_type = true;
            rc = profile_type_copy(&s.sel.profile_type, t, err);
            if (rc == 0 &&
                (selector_format(&s.sel, text) != 0 || strata_buffer_append_byte(text, 0) != 0))
                rc = strata_error_oom(err);
            *found = rc == 0;
        }
        split_free(&s);
    }
    type_list_free(&types);
    return rc;
}

/* An empty finalized tree (a diff tree when diff). */
static int empty_tree(query_tree_result *tr, bool diff, strata_error *err) {
    memset(tr, 0, sizeof *tr);
    if (calltree_create(&tr->tree, 0, err) != 0)
        return -1;
    calltree_set_diff(tr->tree, diff);
    return calltree_finalize(tr->tree, err);
}

/* The tree of one merge (or a diff of base against main), grouped as given; *empty when either
 * side has no data (tr then holds an empty finalized tree). */
static int merge_tree(querier *q, const char *tenant, const merge_args *base,
                      const merge_args *main, unsigned group_mask, query_tree_result *tr,
                      strata_error *err) {
    const merge_args *sides[2] = {base, main};
    strata_buffer text[2] = {STRATA_BUFFER_INIT, STRATA_BUFFER_INIT};
    profile_selection sel[2];
    bool found[2] = {true, true};
    int rc = 0;
    for (int i = 0; i < 2 && rc == 0; i++) {
        if (sides[i] == NULL)
            continue;
        sel[i] = (profile_selection){.mode = SELECTION_MERGE,
                                     .start_ns = ms_to_ns(sides[i]->start_ms, INT64_MIN),
                                     .end_ns = ms_to_ns(sides[i]->end_ms, INT64_MAX)};
        rc = merge_query(q, tenant, sides[i], sel[i].start_ns, sel[i].end_ns, &text[i], &found[i],
                         err);
        sel[i].query = (const char *)text[i].data;
    }
    memset(tr, 0, sizeof *tr);
    calltree_grouping g = {.mask = group_mask};
    if (rc == 0 && found[0] && found[1])
        rc = querier_build_tree(q, tenant, base != NULL ? &sel[0] : NULL, &sel[1], true, &g, tr,
                                err);
    if (rc == 0 && !(found[0] && found[1]))
        rc = strata_error_set(err, STRATA_NOT_FOUND, "no profiles of the type");
    if (rc != 0 && err->code == STRATA_NOT_FOUND) { /* no data: an empty answer, as Pyroscope */
        query_tree_result_free(tr);
        rc = empty_tree(tr, base != NULL, err);
    }
    strata_buffer_free(&text[0]);
    strata_buffer_free(&text[1]);
    return rc;
}

/* The flame graph of tr as field 1 (flamegraph) of the response. */
static int answer_flamegraph(querier *q, const query_tree_result *tr, int64_t max_nodes,
                             strata_buffer *resp, strata_error *err) {
    calltree_report_options opts;
    querier_report_options(q, tr, 0, max_nodes > 0 ? (uint64_t)max_nodes : 0, &opts);
    strata_buffer fg = STRATA_BUFFER_INIT;
    int rc = calltree_encode_pyroscope_flamegraph(tr->tree, &opts, &fg, err);
    if (rc == 0 && strata_pb_append_len_field(resp, 1, fg.data, fg.len) != 0)
        rc = strata_error_oom(err);
    strata_buffer_free(&fg);
    return rc;
}

/* A stack_trace_selector that selects something (call-site prefixes). */
static bool selects_stacks(int selector_case, const Querier__V1__StackTraceSelector *s) {
    return selector_case != 0 && s != NULL && s->n_call_site > 0;
}

/* The merge_args of a request with Pyroscope's merge fields (the three Select requests share
 * their names). */
#define MERGE_ARGS(r)                                                                              \
    ((merge_args){.type_id = (r)->profile_typeid,                                                  \
                  .label_selector = (r)->label_selector,                                           \
                  .start_ms = (r)->start,                                                          \
                  .end_ms = (r)->end,                                                              \
                  .has_stack_selector =                                                            \
                      selects_stacks((r)->_stack_trace_selector_case, (r)->stack_trace_selector)})

static merge_args stacktraces_args(const Querier__V1__SelectMergeStacktracesRequest *r) {
    return MERGE_ARGS(r);
}

static int handle_select_merge_stacktraces(rpc_call *call, const uint8_t *req, size_t len,
                                           strata_buffer *resp, strata_error *err, void *arg) {
    querier *q = arg;
    int64_t start = strata_monotonic_ns();
    strata_tenant tenant;
    if (querier_call_tenant(call, &tenant, err) != 0)
        return -1;
    Querier__V1__SelectMergeStacktracesRequest *r =
        querier__v1__select_merge_stacktraces_request__unpack(NULL, len, req);
    if (r == NULL)
        return querier_bad_request(err, "SelectMergeStacktracesRequest");
    merge_args a = stacktraces_args(r);
    query_tree_result tr;
    int rc = merge_tree(q, tenant.name, NULL, &a, CALLTREE_GROUP_FUNCTION_NAME, &tr, err);
    if (rc == 0)
        rc = answer_flamegraph(q, &tr, r->_max_nodes_case ? r->max_nodes : 0, resp, err);
    query_tree_result_free(&tr);
    querier__v1__select_merge_stacktraces_request__free_unpacked(r, NULL);
    querier_observe(q, "pyroscope_merge", rc == 0 ? STRATA_OK : err->code, start);
    return rc;
}

static int handle_select_merge_span_profile(rpc_call *call, const uint8_t *req, size_t len,
                                            strata_buffer *resp, strata_error *err, void *arg) {
    querier *q = arg;
    int64_t start = strata_monotonic_ns();
    strata_tenant tenant;
    if (querier_call_tenant(call, &tenant, err) != 0)
        return -1;
    Querier__V1__SelectMergeSpanProfileRequest *r =
        querier__v1__select_merge_span_profile_request__unpack(NULL, len, req);
    if (r == NULL)
        return querier_bad_request(err, "SelectMergeSpanProfileRequest");
    merge_args a = {.type_id = r->profile_typeid,
                    .label_selector = r->label_selector,
                    .start_ms = r->start,
                    .end_ms = r->end,
                    .span_ids = r->span_selector,
                    .n_span_ids = r->n_span_selector};
    query_tree_result tr;
    memset(&tr, 0, sizeof tr);
    int rc = r->n_span_selector == 0 /* no span: no samples */
                 ? empty_tree(&tr, false, err)
                 : merge_tree(q, tenant.name, NULL, &a, CALLTREE_GROUP_FUNCTION_NAME, &tr, err);
    if (rc == 0)
        rc = answer_flamegraph(q, &tr, r->_max_nodes_case ? r->max_nodes : 0, resp, err);
    query_tree_result_free(&tr);
    querier__v1__select_merge_span_profile_request__free_unpacked(r, NULL);
    querier_observe(q, "pyroscope_span_merge", rc == 0 ? STRATA_OK : err->code, start);
    return rc;
}

static int handle_diff(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                       strata_error *err, void *arg) {
    querier *q = arg;
    int64_t start = strata_monotonic_ns();
    strata_tenant tenant;
    if (querier_call_tenant(call, &tenant, err) != 0)
        return -1;
    Querier__V1__DiffRequest *r = querier__v1__diff_request__unpack(NULL, len, req);
    if (r == NULL)
        return querier_bad_request(err, "DiffRequest");
    int rc = 0;
    query_tree_result tr;
    memset(&tr, 0, sizeof tr);
    if (r->left == NULL || r->right == NULL) {
        rc = strata_error_set(err, STRATA_INVALID_ARGUMENT, "Diff needs left and right");
    } else {
        merge_args left = stacktraces_args(r->left), right = stacktraces_args(r->right);
        rc = merge_tree(q, tenant.name, &left, &right, CALLTREE_GROUP_FUNCTION_NAME, &tr, err);
        int64_t max_nodes = r->right->_max_nodes_case ? r->right->max_nodes : 0;
        if (rc == 0)
            rc = answer_flamegraph(q, &tr, max_nodes, resp, err);
    }
    query_tree_result_free(&tr);
    querier__v1__diff_request__free_unpacked(r, NULL);
    querier_observe(q, "pyroscope_diff", rc == 0 ? STRATA_OK : err->code, start);
    return rc;
}

static int handle_select_merge_profile(rpc_call *call, const uint8_t *req, size_t len,
                                       strata_buffer *resp, strata_error *err, void *arg) {
    querier *q = arg;
    int64_t start = strata_monotonic_ns();
    strata_tenant tenant;
    if (querier_call_tenant(call, &tenant, err) != 0)
        return -1;
    Querier__V1__SelectMergeProfileRequest *r =
        querier__v1__select_merge_profile_request__unpack(NULL, len, req);
    if (r == NULL)
        return querier_bad_request(err, "SelectMergeProfileRequest");
    merge_args a = MERGE_ARGS(r);
    query_tree_result tr;
    int rc = merge_tree(q, tenant.name, NULL, &a, CALLTREE_GROUP_EXACT, &tr, err);
    if (rc == 0 && calltree_node_count(tr.tree) > 1) { /* none: an empty Profile */
        calltree_report_options opts;
        querier_report_options(q, &tr, 0, 0, &opts);
        rc = calltree_encode_pprof(tr.tree, &opts, false, resp, err);
    }
    query_tree_result_free(&tr);
    querier__v1__select_merge_profile_request__free_unpacked(r, NULL);
    querier_observe(q, "pyroscope_pprof", rc == 0 ? STRATA_OK : err->code, start);
    return rc;
}

/* ---- SelectSeries and Series: range queries regrouped ------------------------------------- */

/* A point of a regrouped series. */
typedef struct sum_point {
    int64_t time_ns;
    int64_t value;
    int64_t count;
} sum_point;

typedef struct out_series {
    label_set labels;
    sum_point *points;
    size_t n, cap;
    int64_t total;
} out_series;

typedef struct series_set {
    out_series *items;
    size_t n, cap;
} series_set;

static void series_set_free(series_set *s) {
    for (size_t i = 0; i < s->n; i++) {
        label_set_free(&s->items[i].labels);
        free(s->items[i].points);
    }
    free(s->items);
}

/* The series for labels (taking them), found or added. */
static out_series *series_for(series_set *s, label_set *labels, strata_error *err) {
    for (size_t i = 0; i < s->n; i++)
        if (label_set_compare(&s->items[i].labels, labels) == 0) {
            label_set_free(labels);
            return &s->items[i];
        }
    if (STRATA_ARRAY_RESERVE_OR_OOM(s->items, s->cap, s->n + 1, err) != 0) {
        label_set_free(labels);
        return NULL;
    }
    out_series *o = &s->items[s->n++];
    memset(o, 0, sizeof *o);
    o->labels = *labels;
    return o;
}

static int add_points(out_series *o, const range_series *in, strata_error *err) {
    if (STRATA_ARRAY_RESERVE_OR_OOM(o->points, o->cap, o->n + in->n_points, err) != 0)
        return -1;
    for (size_t i = 0; i < in->n_points; i++) {
        const range_point *p = &in->points[i];
        o->points[o->n++] = (sum_point){p->time_ns, p->value, p->count > 0 ? p->count : 1};
        o->total += p->value;
    }
    return 0;
}

/* labels cut to names (a copy, sorted). */
static int project(const label_set *labels, char *const *names, size_t n, label_set *out,
                   strata_error *err) {
    *out = (label_set)LABEL_SET_INIT;
    for (size_t i = 0; i < n; i++) {
        const char *v = label_set_get(labels, names[i]);
        if (v != NULL && label_set_get(out, names[i]) == NULL &&
            label_set_add(out, names[i], strlen(names[i]), v, strlen(v), err) != 0) {
            label_set_free(out);
            return -1;
        }
    }
    label_set_sort(out);
    return 0;
}

/* Adds a range query's series into set, regrouped by names (all labels when keep_all). */
static int regroup(series_set *set, const range_series *in, size_t n, char *const *names,
                   size_t n_names, bool keep_all, strata_error *err) {
    for (size_t i = 0; i < n; i++) {
        label_set labels;
        int rc = keep_all ? label_set_copy(&labels, &in[i].labels, err)
                          : project(&in[i].labels, names, n_names, &labels, err);
        if (rc != 0)
            return -1;
        out_series *o = series_for(set, &labels, err);
        if (o == NULL || add_points(o, &in[i], err) != 0)
            return -1;
    }
    return 0;
}

static int compare_points(const void *a, const void *b) {
    const sum_point *x = a, *y = b;
    return (x->time_ns > y->time_ns) - (x->time_ns < y->time_ns);
}

/* Sorts a series' points by time and sums those of one time. */
static void combine_points(out_series *o) {
    if (o->n == 0)
        return;
    qsort(o->points, o->n, sizeof *o->points, compare_points);
    size_t k = 0;
    for (size_t i = 1; i < o->n; i++) {
        if (o->points[i].time_ns == o->points[k].time_ns) {
            o->points[k].value += o->points[i].value;
            o->points[k].count += o->points[i].count;
        } else {
            o->points[++k] = o->points[i];
        }
    }
    o->n = k + 1;
}

static int compare_totals_desc(const void *a, const void *b) {
    const out_series *x = a, *y = b;
    return (x->total < y->total) - (x->total > y->total);
}

static label_pair_pb *pairs_of(const label_set *ls, label_pair_pb ***ptrs) {
    label_pair_pb *pairs = calloc(ls->count + 1, sizeof *pairs);
    *ptrs = calloc(ls->count + 1, sizeof **ptrs);
    if (pairs == NULL || *ptrs == NULL) {
        free(pairs);
        free(*ptrs);
        *ptrs = NULL;
        return NULL;
    }
    for (size_t i = 0; i < ls->count; i++) {
        querier__v1__label_pair__init(&pairs[i]);
        pairs[i].name = ls->labels[i].name;
        pairs[i].value = ls->labels[i].value;
        (*ptrs)[i] = &pairs[i];
    }
    return pairs;
}

/* SelectSeriesResponse of set (points averaged per profile when average). */
static int answer_series(const series_set *set, bool average, strata_buffer *resp,
                         strata_error *err) {
    size_t n = set->n;
    Querier__V1__Series *series = calloc(n + 1, sizeof *series);
    Querier__V1__Series **ptrs = calloc(n + 1, sizeof *ptrs);
    label_pair_pb **pairs = calloc(n + 1, sizeof *pairs);
    label_pair_pb ***pair_ptrs = calloc(n + 1, sizeof *pair_ptrs);
    Querier__V1__Point **points = calloc(n + 1, sizeof *points);
    Querier__V1__Point ***point_ptrs = calloc(n + 1, sizeof *point_ptrs);
    int rc = series && ptrs && pairs && pair_ptrs && points && point_ptrs ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const out_series *o = &set->items[i];
        querier__v1__series__init(&series[i]);
        ptrs[i] = &series[i];
        pairs[i] = pairs_of(&o->labels, &pair_ptrs[i]);
        points[i] = calloc(o->n + 1, sizeof *points[i]);
        point_ptrs[i] = calloc(o->n + 1, sizeof *point_ptrs[i]);
        if (pairs[i] == NULL || points[i] == NULL || point_ptrs[i] == NULL) {
            rc = -1;
            break;
        }
        series[i].labels = pair_ptrs[i];
        series[i].n_labels = o->labels.count;
        for (size_t k = 0; k < o->n; k++) {
            const sum_point *p = &o->points[k];
            querier__v1__point__init(&points[i][k]);
            points[i][k].value = average ? (double)p->value / (double)p->count : (double)p->value;
            points[i][k].timestamp = p->time_ns / NS_PER_MS;
            point_ptrs[i][k] = &points[i][k];
        }
        series[i].points = point_ptrs[i];
        series[i].n_points = o->n;
    }
    if (rc != 0) {
        rc = strata_error_oom(err);
    } else {
        Querier__V1__SelectSeriesResponse out = QUERIER__V1__SELECT_SERIES_RESPONSE__INIT;
        out.series = ptrs;
        out.n_series = n;
        rc = querier_pack(&out.base, resp, err);
    }
    for (size_t i = 0; i < n; i++) {
        free(pairs != NULL ? pairs[i] : NULL);
        free(pair_ptrs != NULL ? pair_ptrs[i] : NULL);
        free(points != NULL ? points[i] : NULL);
        free(point_ptrs != NULL ? point_ptrs[i] : NULL);
    }
    free(series);
    free(ptrs);
    free(pairs);
    free(pair_ptrs);
    free(points);
    free(point_ptrs);
    return rc;
}

/* Runs one range query of sel's type and adds it to set; nothing matching is no error. */
static int range_into(querier *q, const char *tenant, const selector *sel, int64_t from, int64_t to,
                      int64_t step, char *const *sum_by, size_t n_sum_by, char *const *group,
                      size_t n_group, bool keep_all, series_set *set, strata_error *err) {
    range_series *series = NULL;
    size_t n = 0;
    int rc = query_range_summed(q->engine, tenant, sel, from, to, step, (const char *const *)sum_by,
                                n_sum_by, &series, &n, NULL, err);
    if (rc != 0 && err->code == STRATA_NOT_FOUND)
        return 0;
    if (rc == 0)
        rc = regroup(set, series, n, group, n_group, keep_all, err);
    query_range_free(series, n);
    return rc;
}

static int handle_select_series(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                                strata_error *err, void *arg) {
    querier *q = arg;
    int64_t start = strata_monotonic_ns();
    strata_tenant tenant;
    if (querier_call_tenant(call, &tenant, err) != 0)
        return -1;
    Querier__V1__SelectSeriesRequest *r =
        querier__v1__select_series_request__unpack(NULL, len, req);
    if (r == NULL)
        return querier_bad_request(err, "SelectSeriesRequest");
    merge_args a = MERGE_ARGS(r);
    int64_t now = strata_now_ns();
    int64_t from = ms_to_ns(r->start, now - SERIES_DEFAULT_WINDOW_NS), to = ms_to_ns(r->end, now);
    int64_t step = r->step > 0 && r->step < 1e9 ? (int64_t)llround(r->step * 1e9) : 0;
    step = querier_range_step(from, to, step, 0);
    strata_buffer text = STRATA_BUFFER_INIT;
    series_set set = {0};
    bool found = false;
    selector sel;
    memset(&sel, 0, sizeof sel);
    int rc = to < from ? strata_error_set(err, STRATA_INVALID_ARGUMENT, "end is before start")
                       : merge_query(q, tenant.name, &a, from, to, &text, &found, err);
    if (rc == 0 && found && selector_parse((const char *)text.data, &sel, err) != 0)
        rc = -1;
    if (rc == 0 && found)
        rc = range_into(q, tenant.name, &sel, from, to, step, r->group_by, r->n_group_by,
                        r->group_by, r->n_group_by, false, &set, err);
    for (size_t i = 0; rc == 0 && i < set.n; i++)
        combine_points(&set.items[i]);
    if (rc == 0 && set.n > 1)
        qsort(set.items, set.n, sizeof *set.items, compare_totals_desc);
    if (rc == 0 && r->_limit_case && r->limit > 0 && (uint64_t)r->limit < set.n) {
        for (size_t i = (size_t)r->limit; i < set.n; i++) {
            label_set_free(&set.items[i].labels);
            free(set.items[i].points);
        }
        set.n = (size_t)r->limit;
    }
    bool average =
        r->_aggregation_case &&
        r->aggregation ==
            QUERIER__V1__TIME_SERIES_AGGREGATION_TYPE__TIME_SERIES_AGGREGATION_TYPE_AVERAGE;
    if (rc == 0)
        rc = answer_series(&set, average, resp, err);
    series_set_free(&set);
    selector_free(&sel);
    strata_buffer_free(&text);
    querier__v1__select_series_request__free_unpacked(r, NULL);
    querier_observe(q, "pyroscope_series", rc == 0 ? STRATA_OK : err->code, start);
    return rc;
}

/* The label sets of one type under one selector, cut to names (all labels when none), with the
 * type's pseudo-labels when asked for (or when names is empty). */
static int series_of_type(querier *q, const char *tenant, const split_selector *sp,
                          const profile_type *t, char *const *names, size_t n_names, int64_t from,
                          int64_t to, series_set *set, strata_error *err) {
    char **all = NULL;
    size_t n_all = 0;
    int rc = 0;
    if (n_names == 0)
        rc = query_labels(q->engine, tenant, NULL, &sp->sel, 1, t, from, to, &all, &n_all, err);
    selector sel = sp->sel;
    sel.has_profile_type = true;
    sel.profile_type = *t;
    series_set found = {0};
    char *const *group = n_names > 0 ? names : all;
    size_t n_group = n_names > 0 ? n_names : n_all;
    if (rc == 0)
        rc = range_into(q, tenant, &sel, from, to, to - from > 0 ? to - from : 1, group, n_group,
                        group, n_group, false, &found, err);
    strata_buffer id = STRATA_BUFFER_INIT;
    if (rc == 0 && (type_id(t, &id) != 0 || strata_buffer_append_byte(&id, 0) != 0))
        rc = strata_error_oom(err);
    bool want_type = n_names == 0, want_name = n_names == 0;
    for (size_t i = 0; i < n_names; i++) {
        want_type |= strcmp(names[i], TYPE_LABEL) == 0;
        want_name |= strcmp(names[i], NAME_LABEL) == 0;
    }
    for (size_t i = 0; rc == 0 && i < found.n; i++) {
        label_set *ls = &found.items[i].labels;
        if ((want_type && label_set_set(ls, TYPE_LABEL, (const char *)id.data, err) != 0) ||
            (want_name && label_set_set(ls, NAME_LABEL, t->name, err) != 0)) {
            rc = -1;
            break;
        }
        label_set_sort(ls);
        label_set copy;
        out_series *o = label_set_copy(&copy, ls, err) == 0 ? series_for(set, &copy, err) : NULL;
        if (o == NULL)
            rc = -1;
    }
    strata_buffer_free(&id);
    series_set_free(&found);
    query_strings_free(all, n_all);
    return rc;
}

static int answer_label_sets(const series_set *set, strata_buffer *resp, strata_error *err) {
    Querier__V1__Labels *sets = calloc(set->n + 1, sizeof *sets);
    Querier__V1__Labels **ptrs = calloc(set->n + 1, sizeof *ptrs);
    label_pair_pb **pairs = calloc(set->n + 1, sizeof *pairs);
    label_pair_pb ***pair_ptrs = calloc(set->n + 1, sizeof *pair_ptrs);
    int rc = sets && ptrs && pairs && pair_ptrs ? 0 : strata_error_oom(err);
    for (size_t i = 0; rc == 0 && i < set->n; i++) {
        querier__v1__labels__init(&sets[i]);
        if ((pairs[i] = pairs_of(&set->items[i].labels, &pair_ptrs[i])) == NULL) {
            rc = strata_error_oom(err);
            break;
        }
        sets[i].labels = pair_ptrs[i];
        sets[i].n_labels = set->items[i].labels.count;
        ptrs[i] = &sets[i];
    }
    if (rc == 0) {
        Querier__V1__SeriesResponse out = QUERIER__V1__SERIES_RESPONSE__INIT;
        out.labels_set = ptrs;
        out.n_labels_set = set->n;
        rc = querier_pack(&out.base, resp, err);
    }
    for (size_t i = 0; pairs != NULL && i < set->n; i++) {
        free(pairs[i]);
        free(pair_ptrs[i]);
    }
    free(sets);
    free(ptrs);
    free(pairs);
    free(pair_ptrs);
    return rc;
}

static int compare_label_sets(const void *a, const void *b) {
    return label_set_compare(&((const out_series *)a)->labels, &((const out_series *)b)->labels);
}

static int handle_series(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                         strata_error *err, void *arg) {
    querier *q = arg;
    int64_t start = strata_monotonic_ns();
    strata_tenant tenant;
    if (querier_call_tenant(call, &tenant, err) != 0)
        return -1;
    Querier__V1__SeriesRequest *r = querier__v1__series_request__unpack(NULL, len, req);
    if (r == NULL)
        return querier_bad_request(err, "SeriesRequest");
    int64_t now = strata_now_ns();
    int64_t from = ms_to_ns(r->start, now - SERIES_DEFAULT_WINDOW_NS), to = ms_to_ns(r->end, now);
    matcher_set ms = {0};
    type_list types = {0};
    series_set set = {0};
    int rc = parse_matcher_set(r->matchers, r->n_matchers, &ms, err);
    if (rc == 0)
        rc = list_types(q, tenant.name, from, to, &types, err);
    for (size_t s = 0; rc == 0 && s < ms.n; s++)
        for (size_t i = 0; rc == 0 && i < types.n; i++)
            if (admits_type(&ms.sels[s], &types.types[i]))
                rc = series_of_type(q, tenant.name, &ms.sels[s], &types.types[i], r->label_names,
                                    r->n_label_names, from, to, &set, err);
    if (rc == 0 && set.n > 1)
        qsort(set.items, set.n, sizeof *set.items, compare_label_sets);
    if (rc == 0)
        rc = answer_label_sets(&set, resp, err);
    series_set_free(&set);
    type_list_free(&types);
    if (ms.sels != NULL)
        matcher_set_free(&ms);
    querier__v1__series_request__free_unpacked(r, NULL);
    querier_observe(q, "pyroscope_series_labels", rc == 0 ? STRATA_OK : err->code, start);
    return rc;
}

/* ---- GetProfileStats ----------------------------------------------------------------------- */

static int handle_profile_stats(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                                strata_error *err, void *arg) {
    querier *q = arg;
    (void)req;
    (void)len;
    strata_tenant tenant;
    if (querier_call_tenant(call, &tenant, err) != 0)
        return -1;
    indexed_block **blocks = NULL;
    size_t n = 0;
    if (block_index_acquire(q->index, tenant.name, INT64_MIN, INT64_MAX, &blocks, &n, err) != 0)
        return -1;
    Querier__V1__GetProfileStatsResponse out = QUERIER__V1__GET_PROFILE_STATS_RESPONSE__INIT;
    out.data_ingested = n > 0;
    for (size_t i = 0; i < n; i++) {
        const block_meta *m = &blocks[i]->meta;
        if (i == 0 || m->min_time_ms < out.oldest_profile_time)
            out.oldest_profile_time = m->min_time_ms;
        if (i == 0 || m->max_time_ms - 1 > out.newest_profile_time)
            out.newest_profile_time = m->max_time_ms - 1; /* max_time is exclusive */
    }
    block_index_release_all(q->index, blocks, n);
    return querier_pack(&out.base, resp, err);
}

/* ---- registration ------------------------------------------------------------------------- */

#define OFFLOAD(name, fn)                                                                          \
    static void name(rpc_call *call, const uint8_t *req, size_t len, void *arg) {                  \
        querier *q = arg;                                                                          \
        querier_offload(q, q->pool, call, req, len, fn);                                           \
    }

OFFLOAD(async_profile_types, handle_profile_types)
OFFLOAD(async_label_names, handle_label_names)
OFFLOAD(async_label_values, handle_label_values)
OFFLOAD(async_series, handle_series)
OFFLOAD(async_select_merge_stacktraces, handle_select_merge_stacktraces)
OFFLOAD(async_select_merge_profile, handle_select_merge_profile)
OFFLOAD(async_select_merge_span_profile, handle_select_merge_span_profile)
OFFLOAD(async_select_series, handle_select_series)
OFFLOAD(async_diff, handle_diff)
OFFLOAD(async_profile_stats, handle_profile_stats)

int querier_register_pyroscope_api(querier *q, rpc_server *server, strata_error *err) {
    static const struct {
        const char *method;
        rpc_handler fn;
    } methods[] = {
        {QUERIER_V1 "ProfileTypes", async_profile_types},
        {QUERIER_V1 "LabelNames", async_label_names},
        {QUERIER_V1 "LabelValues", async_label_values},
        {QUERIER_V1 "Series", async_series},
        {QUERIER_V1 "SelectMergeStacktraces", async_select_merge_stacktraces},
        {QUERIER_V1 "SelectMergeProfile", async_select_merge_profile},
        {QUERIER_V1 "SelectMergeSpanProfile", async_select_merge_span_profile},
        {QUERIER_V1 "SelectSeries", async_select_series},
        {QUERIER_V1 "Diff", async_diff},
        {QUERIER_V1 "GetProfileStats", async_profile_stats},
    };
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (rpc_server_add_method(server, methods[i].method, methods[i].fn, q, err) != 0)
            return -1;
    return 0;
}
