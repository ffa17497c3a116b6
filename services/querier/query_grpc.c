/*
 * query_grpc.c - parca.query.v1alpha1.QueryService on gRPC: the tenant (common/tenant.h's rule,
 * before anything is read), request decoding (protobuf-c), the engine call, response encoding.
 * Semantics and defaults follow Parca (reference parca-api.md 1.3).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/tenant.h"
#include "common/random_id.h"
#include "common/utf8.h"
#include "json/json.h"
#include "debuginfo/debuginfo.h"
#include "labels/labels.h"
#include "parca/query/v1alpha1/query.pb-c.h"
#include "querier_internal.h"
#include "query_pool.h"
#include "range_encode.h"

typedef Google__Protobuf__Timestamp timestamp_pb;
typedef Parca__Query__V1alpha1__QueryRequest query_request_pb;

#define TIME_MIN INT64_MIN
#define TIME_MAX INT64_MAX

static int64_t ts_to_ns(const timestamp_pb *ts, int64_t fallback) {
    if (ts == NULL)
        return fallback;
    return ts->seconds * STRATA_NS_PER_SEC + ts->nanos;
}

#define call_tenant querier_call_tenant

/* Parses each match string into sels (an empty string selects all). */
static int parse_matchers(char **match, size_t n, selector **out, size_t *n_out,
                          strata_error *err) {
    *out = calloc(n + 1, sizeof **out);
    *n_out = 0;
    if (*out == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < n; i++) {
        if (selector_parse(match[i], &(*out)[i], err) != 0) {
            for (size_t j = 0; j < i; j++)
                selector_free(&(*out)[j]);
            free(*out);
            *out = NULL;
            return strata_error_wrap(err, "match[%zu]", i);
        }
    }
    *n_out = n;
    return 0;
}

static void free_matchers(selector *sels, size_t n) {
    for (size_t i = 0; i < n; i++)
        selector_free(&sels[i]);
    free(sels);
}

/* ---- ProfileTypes ------------------------------------------------------------------------- */

static int handle_profile_types(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                                strata_error *err, void *arg) {
    querier *q = arg;
    int64_t start = strata_monotonic_ns();
    strata_tenant tenant;
    if (call_tenant(call, &tenant, err) != 0)
        return -1;
    Parca__Query__V1alpha1__ProfileTypesRequest *r =
        parca__query__v1alpha1__profile_types_request__unpack(NULL, len, req);
    if (r == NULL)
        return querier_bad_request(err, "ProfileTypesRequest");
    int64_t from = r->_start_case ? ts_to_ns(r->start, TIME_MIN) : TIME_MIN;
    int64_t to = r->_end_case ? ts_to_ns(r->end, TIME_MAX) : TIME_MAX;
    parca__query__v1alpha1__profile_types_request__free_unpacked(r, NULL);
    profile_type *types = NULL;
    size_t n = 0;
    int rc = query_profile_types(q->engine, tenant.name, from, to, &types, &n, err);
    Parca__Query__V1alpha1__ProfileType *pts = calloc(n + 1, sizeof *pts);
    Parca__Query__V1alpha1__ProfileType **ptrs = calloc(n + 1, sizeof *ptrs);
    if (rc == 0 && (pts == NULL || ptrs == NULL))
        rc = strata_error_oom(err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        parca__query__v1alpha1__profile_type__init(&pts[i]);
        pts[i].name = types[i].name;
        pts[i].sample_type = types[i].sample_type;
        pts[i].sample_unit = types[i].sample_unit;
        pts[i].period_type = types[i].period_type;
        pts[i].period_unit = types[i].period_unit;
        pts[i].delta = types[i].delta;
        ptrs[i] = &pts[i];
    }
    if (rc == 0) {
        Parca__Query__V1alpha1__ProfileTypesResponse out =
            PARCA__QUERY__V1ALPHA1__PROFILE_TYPES_RESPONSE__INIT;
        out.n_types = n;
        out.types = ptrs;
        rc = querier_pack(&out.base, resp, err);
    }
    free(pts);
    free(ptrs);
    query_profile_types_free(types, n);
    querier_observe(q, "profile_types", rc == 0 ? STRATA_OK : err->code, start);
    return rc;
}

/* ---- Labels and Values -------------------------------------------------------------------- */

typedef struct labels_args {
    char **match;
    size_t n_match;
    const timestamp_pb *start, *end;
    const char *profile_type; /* NULL when absent */
    const char *name;         /* NULL: label names */
} labels_args;

static int run_labels(querier *q, const char *tenant, const labels_args *a, char ***out, size_t *n,
                      strata_error *err) {
    selector *sels = NULL;
    size_t n_sels = 0;
    profile_type type;
    bool has_type = a->profile_type != NULL && a->profile_type[0] != '\0';
    memset(&type, 0, sizeof type);
    if (has_type && profile_type_parse(a->profile_type, strlen(a->profile_type), &type, err) != 0)
        return strata_error_wrap(err, "profile_type");
    int rc = parse_matchers(a->match, a->n_match, &sels, &n_sels, err);
    if (rc == 0)
        rc = query_labels(q->engine, tenant, a->name, sels, n_sels, has_type ? &type : NULL,
                          ts_to_ns(a->start, TIME_MIN), ts_to_ns(a->end, TIME_MAX), out, n, err);
    free_matchers(sels, n_sels);
    profile_type_free(&type);
    return rc;
}

static int handle_labels(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                         strata_error *err, void *arg) {
    querier *q = arg;
    int64_t start = strata_monotonic_ns();
    strata_tenant tenant;
    if (call_tenant(call, &tenant, err) != 0)
        return -1;
    Parca__Query__V1alpha1__LabelsRequest *r =
        parca__query__v1alpha1__labels_request__unpack(NULL, len, req);
    if (r == NULL)
        return querier_bad_request(err, "LabelsRequest");
    labels_args a = {
        r->match, r->n_match, r->start, r->end, r->_profile_type_case ? r->profile_type : NULL,
        NULL};
    char **names = NULL;
    size_t n = 0;
    int rc = run_labels(q, tenant.name, &a, &names, &n, err);
    parca__query__v1alpha1__labels_request__free_unpacked(r, NULL);
    if (rc == 0) {
        Parca__Query__V1alpha1__LabelsResponse out = PARCA__QUERY__V1ALPHA1__LABELS_RESPONSE__INIT;
        out.n_label_names = n;
        out.label_names = names;
        rc = querier_pack(&out.base, resp, err);
    }
    query_strings_free(names, n);
    querier_observe(q, "labels", rc == 0 ? STRATA_OK : err->code, start);
    return rc;
}

static int handle_values(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                         strata_error *err, void *arg) {
    querier *q = arg;
    int64_t start = strata_monotonic_ns();
    strata_tenant tenant;
    if (call_tenant(call, &tenant, err) != 0)
        return -1;
    Parca__Query__V1alpha1__ValuesRequest *r =
        parca__query__v1alpha1__values_request__unpack(NULL, len, req);
    if (r == NULL)
        return querier_bad_request(err, "ValuesRequest");
    int rc = 0;
    char **values = NULL;
    size_t n = 0;
    if (!label_name_is_valid(r->label_name, strlen(r->label_name)))
        rc = strata_error_set(err, STRATA_INVALID_ARGUMENT, "label_name \"%.64s\" is not valid",
                              r->label_name);
    labels_args a = {
        r->match,     r->n_match, r->start, r->end, r->_profile_type_case ? r->profile_type : NULL,
        r->label_name};
    if (rc == 0)
        rc = run_labels(q, tenant.name, &a, &values, &n, err);
    parca__query__v1alpha1__values_request__free_unpacked(r, NULL);
    if (rc == 0) {
        Parca__Query__V1alpha1__ValuesResponse out = PARCA__QUERY__V1ALPHA1__VALUES_RESPONSE__INIT;
        out.n_label_values = n;
        out.label_values = values;
        rc = querier_pack(&out.base, resp, err);
    }
    query_strings_free(values, n);
    querier_observe(q, "values", rc == 0 ? STRATA_OK : err->code, start);
    return rc;
}

/* ---- QueryRange --------------------------------------------------------------------------- */

/* What the answer left out, as the trailing metadata entry "strata-warnings". */
static void set_warnings(querier *q, rpc_call *call, const query_stats *a, const query_stats *b) {
    char text[1024];
    querier_warnings(q, a, b, text, sizeof text);
    if (text[0] != '\0')
        (void)rpc_call_set_trailer(call, "strata-warnings", text);
}

static int handle_query_range(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                              strata_error *err, void *arg) {
    querier *q = arg;
    int64_t start = strata_monotonic_ns();
    strata_tenant tenant;
    if (call_tenant(call, &tenant, err) != 0)
        return -1;
    Parca__Query__V1alpha1__QueryRangeRequest *r =
        parca__query__v1alpha1__query_range_request__unpack(NULL, len, req);
    if (r == NULL)
        return querier_bad_request(err, "QueryRangeRequest");
    selector sel;
    range_series *series = NULL;
    size_t n = 0;
    int rc = -1;
    query_stats stats = {0};
    if (r->start == NULL || r->end == NULL) {
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "start and end are required");
    } else if (selector_parse(r->query, &sel, err) != 0) {
        strata_error_wrap(err, "invalid query");
    } else {
        /* Parca: step optional (Grafana sends only query, start, end and limit), limit the most
         * points, never a step under 1 s. */
        int64_t from = ts_to_ns(r->start, 0), to = ts_to_ns(r->end, 0);
        int64_t step = r->step != NULL ? r->step->seconds * STRATA_NS_PER_SEC + r->step->nanos : 0;
        step = querier_range_step(from, to, step, r->limit);
        rc = query_range(q->engine, tenant.name, &sel, from, to, step,
                         (const char *const *)r->sum_by, r->n_sum_by, &series, &n, &stats, err);
        selector_free(&sel);
    }
    if (rc == 0)
        set_warnings(q, call, &stats, NULL);
    parca__query__v1alpha1__query_range_request__free_unpacked(r, NULL);
    if (rc == 0)
        rc = range_encode_response(series, n, resp, err);
    query_range_free(series, n);
    querier_observe(q, "query_range", rc == 0 ? STRATA_OK : err->code, start);
    return rc;
}

/* ---- Query -------------------------------------------------------------------------------- */

static int selection_from_merge(const Parca__Query__V1alpha1__MergeProfile *m, profile_selection *s,
                                strata_error *err) {
    if (m == NULL || m->start == NULL || m->end == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "merge needs query, start and end");
    s->mode = SELECTION_MERGE;
    s->query = m->query;
    s->start_ns = ts_to_ns(m->start, 0);
    s->end_ns = ts_to_ns(m->end, 0);
    if (s->end_ns < s->start_ns)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "merge end is before start");
    return 0;
}

static int selection_from_single(const Parca__Query__V1alpha1__SingleProfile *p,
                                 profile_selection *s, strata_error *err) {
    if (p == NULL || p->time == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "single needs query and time");
    s->mode = SELECTION_SINGLE;
    s->query = p->query;
    s->time_ns = ts_to_ns(p->time, 0);
    return 0;
}

static int selection_from_diff_side(const Parca__Query__V1alpha1__ProfileDiffSelection *d,
                                    profile_selection *s, const char *side, strata_error *err) {
    if (d == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "diff needs selection %s", side);
    int rc = d->options_case == PARCA__QUERY__V1ALPHA1__PROFILE_DIFF_SELECTION__OPTIONS_MERGE
                 ? selection_from_merge(d->merge, s, err)
                 : selection_from_single(d->single, s, err);
    return rc == 0 ? 0 : strata_error_wrap(err, "diff %s", side);
}

/* Decodes the request's selections into a (diff base, or NULL) and b. */
static int request_selections(const query_request_pb *r, profile_selection *a, profile_selection *b,
                              bool *is_diff, bool *absolute, strata_error *err) {
    *is_diff = false;
    *absolute = false;
    switch (r->mode) {
        case PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__MODE__MODE_MERGE:
            if (r->options_case != PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__OPTIONS_MERGE)
                return strata_error_set(err, STRATA_INVALID_ARGUMENT, "MODE_MERGE needs merge");
            return selection_from_merge(r->merge, b, err);
        case PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__MODE__MODE_DIFF:
            if (r->options_case != PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__OPTIONS_DIFF || !r->diff)
                return strata_error_set(err, STRATA_INVALID_ARGUMENT, "MODE_DIFF needs diff");
            *is_diff = true;
            *absolute = r->diff->_absolute_case && r->diff->absolute;
            if (selection_from_diff_side(r->diff->a, a, "a", err) != 0)
                return -1;
            return selection_from_diff_side(r->diff->b, b, "b", err);
        default:
            if (r->options_case != PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__OPTIONS_SINGLE)
                return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                        "MODE_SINGLE_UNSPECIFIED needs single");
            return selection_from_single(r->single, b, err);
    }
}

/* Parca's group_by (function_name when absent; labels.<name> and labels group by pprof labels);
 * a PPROF export is always exact, so it keeps every location, line and address as stored, and
 * carries every sample label (as `go tool pprof -proto` does). */
static int request_group_by(const query_request_pb *r,
                            Parca__Query__V1alpha1__QueryRequest__ReportType type,
                            calltree_grouping *group_by, strata_error *err) {
    int rc;
    if (r->_group_by_case != PARCA__QUERY__V1ALPHA1__QUERY_REQUEST___GROUP_BY_GROUP_BY ||
        r->group_by == NULL)
        rc = calltree_group_by_parse(NULL, 0, group_by, err);
    else
        rc = calltree_group_by_parse((const char *const *)r->group_by->fields,
                                     r->group_by->n_fields, group_by, err);
    if (rc == 0 && type == PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_PPROF) {
        group_by->mask = CALLTREE_GROUP_EXACT;
        group_by->all_labels = true;
    }
    if (rc == 0 && type == PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_SOURCE)
        group_by->mask = CALLTREE_GROUP_EXACT; /* lines and build ids as stored */
    /* Time splits the tree only where a report lays it out in time: the flame chart, which
     * FLAMECHART always is and FLAMEGRAPH_ARROW becomes with group_by timestamp (as in Parca).
     * The chart is laid out by time alone: label frames do not go with it. */
    if (type == PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_FLAMECHART)
        group_by->by_timestamp = true;
    else if (type !=
             PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_FLAMEGRAPH_ARROW)
        group_by->by_timestamp = false;
    if (rc == 0 && group_by->by_timestamp) {
        calltree_grouping_free(group_by);
        group_by->labels = NULL;
        group_by->n_labels = 0;
        group_by->all_labels = false;
    }
    return rc;
}

/* ---- uploaded sources (lib/debuginfo), as Parca: a request naming a source_reference needs the
 * build's sources; with source_only it only asks whether they exist ---- */

static const Parca__Query__V1alpha1__SourceReference *source_reference(const query_request_pb *r) {
    return r->_source_reference_case ==
                   PARCA__QUERY__V1ALPHA1__QUERY_REQUEST___SOURCE_REFERENCE_SOURCE_REFERENCE
               ? r->source_reference
               : NULL;
}

/* The archive of ref's build (NOT_FOUND naming the build id when none was uploaded). */
static int load_archive(querier *q, const char *tenant,
                        const Parca__Query__V1alpha1__SourceReference *ref, strata_buffer *archive,
                        bool exists_only, strata_error *err) {
    char key[STRATA_TENANT_MAX_LENGTH + DEBUGINFO_MAX_BUILD_ID + 64];
    if (debuginfo_check_build_id(ref->build_id, err) != 0 ||
        debuginfo_sources_key(tenant, ref->build_id, key, sizeof key, err) != 0)
        return -1;
    bool exists = true;
    int rc = exists_only ? bucket_exists(q->store, key, &exists, err)
                         : bucket_get(q->store, key, archive, err);
    if ((rc != 0 && err->code == STRATA_NOT_FOUND) || (rc == 0 && !exists))
        return strata_error_set(err, STRATA_NOT_FOUND, "no sources uploaded for build id %s",
                                ref->build_id);
    return rc;
}

/* The text of ref's file, valid UTF-8 and NUL-terminated, into text. */
static int load_source(querier *q, const char *tenant,
                       const Parca__Query__V1alpha1__SourceReference *ref, strata_buffer *text,
                       strata_error *err) {
    if (ref->filename[0] == '\0')
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "source_reference.filename is empty");
    strata_buffer archive = STRATA_BUFFER_INIT, raw = STRATA_BUFFER_INIT;
    int rc = load_archive(q, tenant, ref, &archive, false, err);
    if (rc == 0)
        rc = source_archive_find(archive.data, archive.len, ref->filename,
                                 SOURCE_ARCHIVE_MAX_FILE_BYTES, &raw, err);
    /* valid UTF-8 for the proto3 string, and no NUL (the string is packed up to its first) */
    for (size_t at = 0; rc == 0 && at <= raw.len;) {
        const uint8_t *nul = at < raw.len ? memchr(raw.data + at, 0, raw.len - at) : NULL;
        size_t end = nul != NULL ? (size_t)(nul - raw.data) : raw.len;
        if (strata_utf8_append_sanitized(text, (const char *)raw.data + at, end - at) != 0 ||
            (nul != NULL && strata_buffer_append(text, "\xef\xbf\xbd", 3) != 0))
            rc = strata_error_oom(err);
        at = end + 1;
    }
    if (rc == 0 && strata_buffer_append_byte(text, 0) != 0)
        rc = strata_error_oom(err);
    if (rc == 0)
        text->len--; /* the NUL stays after the text */
    strata_buffer_free(&archive);
    strata_buffer_free(&raw);
    return rc;
}

/* source_only: an empty Source when the build's sources exist (how Parca's UI asks). */
static int answer_source_exists(querier *q, const char *tenant,
                                const Parca__Query__V1alpha1__SourceReference *ref,
                                strata_buffer *out, strata_error *err) {
    if (load_archive(q, tenant, ref, NULL, true, err) != 0)
        return -1;
    Parca__Query__V1alpha1__Source so = PARCA__QUERY__V1ALPHA1__SOURCE__INIT;
    Parca__Query__V1alpha1__QueryResponse resp = PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__INIT;
    resp.report_case = PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_SOURCE;
    resp.source = &so;
    return querier_pack(&resp.base, out, err);
}

/* ---- Parca's filters, inverted stacks and the sandwich (calltree_view) -------------------- */

#define MAX_QUERY_FILTERS 64
#define P(x) PARCA__QUERY__V1ALPHA1__##x

static void string_match_of(const Parca__Query__V1alpha1__StringCondition *c,
                            calltree_string_match *m) {
    if (c == NULL)
        return;
    m->set = true;
    switch (c->condition_case) {
        case P(STRING_CONDITION__CONDITION_EQUAL):
            *m = (calltree_string_match){true, CALLTREE_MATCH_EQUAL, c->equal};
            break;
        case P(STRING_CONDITION__CONDITION_NOT_EQUAL):
            *m = (calltree_string_match){true, CALLTREE_MATCH_NOT_EQUAL, c->not_equal};
            break;
        case P(STRING_CONDITION__CONDITION_CONTAINS):
            *m = (calltree_string_match){true, CALLTREE_MATCH_CONTAINS, c->contains};
            break;
        case P(STRING_CONDITION__CONDITION_NOT_CONTAINS):
            *m = (calltree_string_match){true, CALLTREE_MATCH_NOT_CONTAINS, c->not_contains};
            break;
        case P(STRING_CONDITION__CONDITION_STARTS_WITH):
            *m = (calltree_string_match){true, CALLTREE_MATCH_STARTS_WITH, c->starts_with};
            break;
        case P(STRING_CONDITION__CONDITION_NOT_STARTS_WITH):
            *m = (calltree_string_match){true, CALLTREE_MATCH_NOT_STARTS_WITH, c->not_starts_with};
            break;
        default:
            m->set = false; /* no condition: matches everything */
    }
}

static void number_match_of(const Parca__Query__V1alpha1__NumberCondition *c,
                            calltree_number_match *m) {
    if (c == NULL || c->condition_case == P(NUMBER_CONDITION__CONDITION__NOT_SET))
        return;
    bool not_equal = c->condition_case == P(NUMBER_CONDITION__CONDITION_NOT_EQUAL);
    *m = (calltree_number_match){true, not_equal, not_equal ? c->not_equal : c->equal};
}

static void criteria_of(const Parca__Query__V1alpha1__FilterCriteria *fc, calltree_criteria *c) {
    if (fc == NULL)
        return;
    string_match_of(fc->function_name, &c->function_name);
    string_match_of(fc->system_name, &c->system_name);
    string_match_of(fc->binary, &c->binary);
    string_match_of(fc->filename, &c->filename);
    number_match_of(fc->address, &c->address);
    number_match_of(fc->line_number, &c->line_number);
}

/* The request's filters (into filters[0..MAX_QUERY_FILTERS)), invert_call_stack and
 * sandwich_by_function; strings point into r. Filters without a condition are skipped. */
static int request_view(const query_request_pb *r, calltree_filter *filters, calltree_view *v,
                        strata_error *err) {
    *v = (calltree_view){.filters = filters};
    if (r->n_filter > MAX_QUERY_FILTERS)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%zu filters: at most %d",
                                r->n_filter, MAX_QUERY_FILTERS);
    for (size_t i = 0; i < r->n_filter; i++) {
        const Parca__Query__V1alpha1__Filter *f = r->filter[i];
        calltree_filter *out = &filters[v->n_filters];
        *out = (calltree_filter){0};
        if (f->filter_case == P(FILTER__FILTER_STACK_FILTER) && f->stack_filter != NULL) {
            const Parca__Query__V1alpha1__StackFilter *sf = f->stack_filter;
            if (sf->filter_case == P(STACK_FILTER__FILTER_CRITERIA)) {
                criteria_of(sf->criteria, &out->criteria);
            } else if (sf->filter_case == P(STACK_FILTER__FILTER_FUNCTION_NAME_STACK_FILTER) &&
                       sf->function_name_stack_filter != NULL &&
                       sf->function_name_stack_filter->function_to_filter[0] != '\0') {
                const Parca__Query__V1alpha1__FunctionNameStackFilter *fn =
                    sf->function_name_stack_filter;
                out->criteria.function_name = (calltree_string_match){
                    true, fn->exclude ? CALLTREE_MATCH_NOT_CONTAINS : CALLTREE_MATCH_CONTAINS,
                    fn->function_to_filter};
            }
        } else if (f->filter_case == P(FILTER__FILTER_FRAME_FILTER) && f->frame_filter != NULL) {
            const Parca__Query__V1alpha1__FrameFilter *ff = f->frame_filter;
            out->frames = true;
            if (ff->filter_case == P(FRAME_FILTER__FILTER_CRITERIA)) {
                criteria_of(ff->criteria, &out->criteria);
            } else if (ff->filter_case == P(FRAME_FILTER__FILTER_BINARY_FRAME_FILTER) &&
                       ff->binary_frame_filter != NULL) {
                out->criteria.binaries =
                    (const char *const *)ff->binary_frame_filter->include_binaries;
                out->criteria.n_binaries = ff->binary_frame_filter->n_include_binaries;
            }
        }
        const calltree_criteria *c = &out->criteria;
        if (c->function_name.set || c->system_name.set || c->binary.set || c->filename.set ||
            c->address.set || c->line_number.set || c->n_binaries > 0)
            v->n_filters++;
    }
    v->invert =
        r->_invert_call_stack_case == P(QUERY_REQUEST___INVERT_CALL_STACK_INVERT_CALL_STACK) &&
        r->invert_call_stack;
    if (r->_sandwich_by_function_case ==
            P(QUERY_REQUEST___SANDWICH_BY_FUNCTION_SANDWICH_BY_FUNCTION) &&
        r->sandwich_by_function != NULL && r->sandwich_by_function[0] != '\0')
        v->sandwich = r->sandwich_by_function;
    return 0;
}

/* Replaces tr's tree with its view; *filtered: what the view removed. */
static int apply_view(query_tree_result *tr, const calltree_view *v, int64_t *filtered,
                      strata_error *err) {
    *filtered = 0;
    if (calltree_view_is_identity(v))
        return 0;
    calltree *viewed;
    if (calltree_view_apply(tr->tree, v, &viewed, filtered, err) != 0)
        return -1;
    calltree_free(tr->tree);
    tr->tree = viewed;
    return 0;
}

#undef P

/* PROFILE_METADATA's labels: the label names of what the selection selects. */
static int metadata_labels(querier *q, const char *tenant, const profile_selection *sel,
                           char ***names, size_t *n, strata_error *err) {
    selector s;
    if (selector_parse(sel->query, &s, err) != 0)
        return -1;
    int64_t start = sel->mode == SELECTION_MERGE ? sel->start_ns : sel->time_ns;
    int64_t end = sel->mode == SELECTION_MERGE ? sel->end_ns : sel->time_ns;
    int rc = query_labels(q->engine, tenant, NULL, &s, 1,
                          s.has_profile_type ? &s.profile_type : NULL, start, end, names, n, err);
    selector_free(&s);
    return rc;
}

static int handle_query(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *out,
                        strata_error *errp, void *arg) {
    querier *q = arg;
    int64_t start = strata_monotonic_ns();
    strata_error err;
    strata_error_clear(&err);
    strata_buffer resp = STRATA_BUFFER_INIT;
    query_request_pb *r = parca__query__v1alpha1__query_request__unpack(NULL, len, req);
    int rc = -1;
    query_tree_result tr;
    memset(&tr, 0, sizeof tr);
    calltree_grouping group_by = {.mask = 0};
    char **md_labels = NULL;
    size_t n_md_labels = 0;
    strata_buffer source_text = STRATA_BUFFER_INIT;
    strata_tenant tenant;
    if (call_tenant(call, &tenant, &err) != 0)
        goto out;
    if (r == NULL) {
        querier_bad_request(&err, "QueryRequest");
        goto out;
    }
    profile_selection a, b;
    bool is_diff, absolute;
    Parca__Query__V1alpha1__QueryRequest__ReportType type = r->report_type;
    if (type ==
        PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_FLAMEGRAPH_UNSPECIFIED)
        type = PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_FLAMEGRAPH_TABLE;
    calltree_filter filters[MAX_QUERY_FILTERS];
    calltree_view view;
    int64_t filtered = 0;
    const Parca__Query__V1alpha1__SourceReference *src = source_reference(r);
    if (src != NULL && src->source_only) {
        rc = answer_source_exists(q, tenant.name, src, &resp, &err);
        goto out;
    }
    if (type == PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_SOURCE &&
        src == NULL) {
        strata_error_set(&err, STRATA_INVALID_ARGUMENT,
                         "REPORT_TYPE_SOURCE needs source_reference (build_id and filename)");
        goto out;
    }
    if (src != NULL && load_source(q, tenant.name, src, &source_text, &err) != 0)
        goto out;
    if (request_selections(r, &a, &b, &is_diff, &absolute, &err) != 0 ||
        request_group_by(r, type, &group_by, &err) != 0 ||
        request_view(r, filters, &view, &err) != 0 ||
        querier_build_tree(q, tenant.name, is_diff ? &a : NULL, &b, absolute, &group_by, &tr,
                           &err) != 0 ||
        apply_view(&tr, &view, &filtered, &err) != 0)
        goto out;
    calltree_report_options opts;
    double trim = r->_node_trim_threshold_case ? r->node_trim_threshold : 0;
    querier_report_options(q, &tr, trim, 0, &opts);
    opts.filtered = filtered;
    if (src != NULL)
        opts.source = (calltree_source){src->build_id, src->filename,
                                        (const char *)source_text.data, source_text.len};
    if (type == PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_PROFILE_METADATA) {
        if (metadata_labels(q, tenant.name, &b, &md_labels, &n_md_labels, &err) != 0)
            goto out;
        opts.metadata_labels = (const char *const *)md_labels;
        opts.n_metadata_labels = n_md_labels;
    }
    rc = calltree_encode_query_response(tr.tree, type, &opts, &resp, &err);
    if (rc == 0)
        set_warnings(q, call, &tr.main.stats, is_diff ? &tr.base.stats : NULL);
out:
    if (r != NULL)
        parca__query__v1alpha1__query_request__free_unpacked(r, NULL);
    query_tree_result_free(&tr);
    calltree_grouping_free(&group_by);
    query_strings_free(md_labels, n_md_labels);
    strata_buffer_free(&source_text);
    querier_observe(q, "query", rc == 0 ? STRATA_OK : err.code, start);
    if (rc == 0) {
        *out = resp; /* hand the bytes over without copying */
        return 0;
    }
    strata_buffer_free(&resp);
    *errp = err;
    return -1;
}

static int handle_has_profile_data(rpc_call *call, const uint8_t *req, size_t len,
                                   strata_buffer *resp, strata_error *err, void *arg);
static int handle_share_profile(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                                strata_error *err, void *arg);

/* ---- running handlers on the query pool --------------------------------------------------- */

typedef struct offloaded_call {
    querier *q;
    rpc_call *call;
    const uint8_t *req; /* valid until the call is finished */
    size_t len;
    rpc_sync_handler fn;
} offloaded_call;

static void run_offloaded(void *arg) {
    offloaded_call *oc = arg;
    strata_buffer resp = STRATA_BUFFER_INIT;
    strata_error err;
    strata_error_clear(&err);
    if (rpc_call_is_cancelled(oc->call)) {
        rpc_call_finish(oc->call, STRATA_CANCELLED, "cancelled before it ran", NULL, 0);
    } else if (oc->fn(oc->call, oc->req, oc->len, &resp, &err, oc->q) == 0) {
        rpc_call_finish_buffer(oc->call, STRATA_OK, NULL, &resp);
    } else {
        rpc_call_finish(oc->call, err.code == STRATA_OK ? STRATA_UNKNOWN : err.code, err.message,
                        NULL, 0);
    }
    strata_buffer_free(&resp);
    free(oc);
}

#define OFFLOAD(name, fn)                                                                          \
    static void name(rpc_call *call, const uint8_t *req, size_t len, void *arg) {                  \
        querier *q = arg;                                                                          \
        querier_offload(q, q->pool, call, req, len, fn);                                           \
    }

void querier_offload(querier *q, query_pool *pool, rpc_call *call, const uint8_t *req, size_t len,
                     rpc_sync_handler fn) {
    strata_error err;
    offloaded_call *oc = malloc(sizeof *oc);
    if (oc == NULL) {
        rpc_call_finish(call, STRATA_RESOURCE_EXHAUSTED, "out of memory", NULL, 0);
        return;
    }
    *oc = (offloaded_call){q, call, req, len, fn};
    if (query_pool_submit(pool, run_offloaded, oc, &err) != 0) {
        free(oc);
        rpc_call_finish(call, err.code, err.message, NULL, 0);
    }
}

OFFLOAD(async_profile_types, handle_profile_types)
OFFLOAD(async_labels, handle_labels)
OFFLOAD(async_values, handle_values)
OFFLOAD(async_query_range, handle_query_range)
OFFLOAD(async_query, handle_query)
OFFLOAD(async_has_profile_data, handle_has_profile_data)
OFFLOAD(async_share_profile, handle_share_profile)

/* ---- small ones --------------------------------------------------------------------------- */

static int handle_has_profile_data(rpc_call *call, const uint8_t *req, size_t len,
                                   strata_buffer *resp, strata_error *err, void *arg) {
    querier *q = arg;
    (void)req;
    (void)len;
    strata_tenant tenant;
    if (call_tenant(call, &tenant, err) != 0)
        return -1;
    profile_type *types = NULL;
    size_t n = 0;
    if (query_profile_types(q->engine, tenant.name, TIME_MIN, TIME_MAX, &types, &n, err) != 0)
        return -1;
    query_profile_types_free(types, n);
    Parca__Query__V1alpha1__HasProfileDataResponse out =
        PARCA__QUERY__V1ALPHA1__HAS_PROFILE_DATA_RESPONSE__INIT;
    out.has_data = n > 0;
    return querier_pack(&out.base, resp, err);
}

/* ---- ShareProfile: a link to the query's pprof, kept in the bucket ----
 *
 * Parca hands the profile to the public pprof.me service; a self-hosted Strata keeps it: the
 * query's PPROF report (the same request with report_type PPROF) is stored at
 * <tenant>/shared/<id>/profile.pb.gz with meta.json {description, created}, and the link is
 * <querier.external_url>/api/v1/shared/<id>, which serves it (`go tool pprof <link>` opens it).
 * The id is 128 random bits, so a link is as private as the tenant's other data is to those who
 * hold it. */

static int store_shared(querier *q, const char *tenant, const char *id,
                        const ProtobufCBinaryData *pprof, const char *description,
                        strata_error *err) {
    char key[STRATA_TENANT_MAX_LENGTH + 96];
    strata_buffer meta = STRATA_BUFFER_INIT;
    json_writer w;
    json_writer_init(&w, &meta);
    json_begin_object(&w);
    json_key(&w, "description");
    json_string(&w, description != NULL ? description : "");
    json_key(&w, "created");
    json_timestamp_ns(&w, strata_now_ns());
    json_end_object(&w);
    int rc = json_writer_finish(&w) != 0 ? strata_error_oom(err) : 0;
    snprintf(key, sizeof key, "%s/shared/%s/profile.pb.gz", tenant, id);
    if (rc == 0)
        rc = bucket_upload(q->store, key, pprof->data, pprof->len, err);
    snprintf(key, sizeof key, "%s/shared/%s/meta.json", tenant, id);
    if (rc == 0)
        rc = bucket_upload(q->store, key, meta.data, meta.len, err);
    strata_buffer_free(&meta);
    return rc;
}

static int handle_share_profile(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                                strata_error *err, void *arg) {
    querier *q = arg;
    strata_tenant tenant;
    if (call_tenant(call, &tenant, err) != 0)
        return -1;
    Parca__Query__V1alpha1__ShareProfileRequest *r =
        parca__query__v1alpha1__share_profile_request__unpack(NULL, len, req);
    if (r == NULL)
        return querier_bad_request(err, "ShareProfileRequest");
    strata_buffer packed = STRATA_BUFFER_INIT, answer = STRATA_BUFFER_INIT;
    Parca__Query__V1alpha1__QueryResponse *qr = NULL;
    char id[STRATA_RANDOM_ID_LEN + 1], link[2048];
    int rc = 0;
    if (r->query_request == NULL) {
        rc = strata_error_set(err, STRATA_INVALID_ARGUMENT, "ShareProfile needs query_request");
    } else {
        r->query_request->report_type =
            PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_PPROF;
        rc = querier_pack(&r->query_request->base, &packed, err);
    }
    if (rc == 0)
        rc = handle_query(call, packed.data, packed.len, &answer, err, q);
    if (rc == 0 && ((qr = parca__query__v1alpha1__query_response__unpack(NULL, answer.len,
                                                                         answer.data)) == NULL ||
                    qr->report_case != PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_PPROF))
        rc = strata_error_set(err, STRATA_INTERNAL, "the PPROF report did not come back");
    if (rc == 0)
        rc = strata_random_id(id, err);
    if (rc == 0)
        rc = store_shared(q, tenant.name, id, &qr->pprof,
                          r->_description_case ? r->description : NULL, err);
    if (rc == 0) {
        snprintf(link, sizeof link, "%s/api/v1/shared/%s", q->external_url, id);
        Parca__Query__V1alpha1__ShareProfileResponse out =
            PARCA__QUERY__V1ALPHA1__SHARE_PROFILE_RESPONSE__INIT;
        out.link = link;
        rc = querier_pack(&out.base, resp, err);
    }
    if (qr != NULL)
        parca__query__v1alpha1__query_response__free_unpacked(qr, NULL);
    parca__query__v1alpha1__share_profile_request__free_unpacked(r, NULL);
    strata_buffer_free(&packed);
    strata_buffer_free(&answer);
    return rc;
}

static int handle_unimplemented(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                                strata_error *err, void *arg) {
    (void)req;
    (void)len;
    (void)resp;
    (void)arg;
    return strata_error_set(err, STRATA_UNIMPLEMENTED, "%s is not implemented by Strata",
                            rpc_call_method(call));
}

int querier_register_grpc(querier *q, rpc_server *server, strata_error *err) {
    static const struct {
        const char *method;
        rpc_handler fn;
    } methods[] = {
        {QUERIER_SERVICE "ProfileTypes", async_profile_types},
        {QUERIER_SERVICE "Labels", async_labels},
        {QUERIER_SERVICE "Values", async_values},
        {QUERIER_SERVICE "QueryRange", async_query_range},
        {QUERIER_SERVICE "Query", async_query},
        {QUERIER_SERVICE "HasProfileData", async_has_profile_data},
    };
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (rpc_server_add_method(server, methods[i].method, methods[i].fn, q, err) != 0)
            return -1;
    if (rpc_server_add_sync_method(server, QUERIER_SERVICE "Series", handle_unimplemented, q,
                                   err) != 0)
        return -1;
    if (rpc_server_add_method(server, QUERIER_SERVICE "ShareProfile", async_share_profile, q,
                              err) != 0)
        return -1;
    if (querier_register_pyroscope_api(q, server, err) != 0)
        return -1;
    return querier_register_peer_service(q, server, err);
}
