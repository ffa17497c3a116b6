/*
 * query_cmd.c - `strata query`: the command-line client of the QueryService (gRPC).
 *
 *   strata query types
 *   strata query labels [--match SEL]... [--type TYPE]
 *   strata query values NAME [--match SEL]... [--type TYPE]
 *   strata query range QUERY [--start T] [--end T] [--step D] [--sum-by LABEL]...
 *   strata query merge QUERY [--start T] [--end T] [--group-by FIELDS] [--top N] [-o FILE.pb.gz]
 *   strata query diff QUERY_A QUERY_B [--start-a T --end-a T --start-b T --end-b T]
 *                     [--absolute] [--group-by FIELDS] [--top N] [-o FILE.pb.gz]
 *   common: [--address HOST:PORT] (default 127.0.0.1:7071) [--tenant T]
 *           [--tls] [--tls-ca FILE] [--tls-cert FILE --tls-key FILE] [--tls-server-name NAME]
 *           [--bearer-token-file FILE]
 *
 * Times are as in the JSON API (Unix ms, RFC 3339, now, now-1h); the default range is the last
 * hour. Merges and diffs print the top functions; -o writes the profile as gzipped pprof for
 * `go tool pprof` (always exact: every location as stored, with the samples' pprof labels).
 * --group-by takes Parca's group_by fields, comma-separated: function_name (the default),
 * function_file_name, location_address, mapping_file, labels.<name> (a pprof sample label, e.g.
 * labels.endpoint, or a series label) and labels (every sample label). A selector matcher on a
 * pprof sample label (`{endpoint="/checkout"}`) keeps only the samples carrying it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common/clock.h"
#include "config/config.h"
#include "parca/query/v1alpha1/query.pb-c.h"
#include "rpc/rpc.h"

#define QUERY_SERVICE "/parca.query.v1alpha1.QueryService/"
#define MAX_REPEATED 32

typedef struct query_args {
    const char *address;
    const char *tenant;
    const char *positional[2];
    size_t n_positional;
    const char *match[MAX_REPEATED];
    size_t n_match;
    const char *sum_by[MAX_REPEATED];
    size_t n_sum_by;
    const char *type;
    const char *start, *end, *start_a, *end_a, *start_b, *end_b, *step, *output, *group_by;
    bool absolute;
    int top;
    rpc_channel_options channel; /* --tls... and --bearer-token-file */
} query_args;

typedef struct flag_spec {
    const char *name;
    size_t offset; /* of a const char * in query_args */
} flag_spec;

static const flag_spec value_flags[] = {
    {"address", offsetof(query_args, address)},   {"tenant", offsetof(query_args, tenant)},
    {"type", offsetof(query_args, type)},         {"start", offsetof(query_args, start)},
    {"end", offsetof(query_args, end)},           {"start-a", offsetof(query_args, start_a)},
    {"end-a", offsetof(query_args, end_a)},       {"start-b", offsetof(query_args, start_b)},
    {"end-b", offsetof(query_args, end_b)},       {"step", offsetof(query_args, step)},
    {"o", offsetof(query_args, output)},          {"output", offsetof(query_args, output)},
    {"group-by", offsetof(query_args, group_by)},
};

static int parse_flag(query_args *a, int argc, char **argv, int *i, strata_error *err) {
    const char *arg = argv[*i];
    const char *value = *i + 1 < argc ? argv[*i + 1] : NULL;
    int took = cli_channel_flag(arg, value, &a->channel, err);
    if (took < 0)
        return -1;
    if (took > 0) {
        *i += took - 1;
        return 0;
    }
    if (cli_flag_is(arg, "absolute")) {
        a->absolute = true;
        return 0;
    }
    if (value == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s needs a value", arg);
    (*i)++;
    if (cli_flag_is(arg, "match") || cli_flag_is(arg, "sum-by")) {
        bool m = cli_flag_is(arg, "match");
        size_t *n = m ? &a->n_match : &a->n_sum_by;
        if (*n == MAX_REPEATED)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "too many %s flags", arg);
        (m ? a->match : a->sum_by)[(*n)++] = value;
        return 0;
    }
    if (cli_flag_is(arg, "top"))
        return cli_count_flag(arg, value, &a->top, err);
    for (size_t f = 0; f < sizeof value_flags / sizeof value_flags[0]; f++)
        if (cli_flag_is(arg, value_flags[f].name)) {
            *(const char **)((char *)a + value_flags[f].offset) = value;
            return 0;
        }
    return strata_error_set(err, STRATA_INVALID_ARGUMENT, "unknown flag %s", arg);
}

static int parse_query_args(int argc, char **argv, query_args *a, strata_error *err) {
    memset(a, 0, sizeof *a);
    a->address = "127.0.0.1:7071";
    a->top = 20;
    for (int i = 0; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1] != '\0') {
            if (parse_flag(a, argc, argv, &i, err) != 0)
                return -1;
        } else if (a->n_positional < 2) {
            a->positional[a->n_positional++] = argv[i];
        } else {
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "unexpected argument \"%s\"",
                                    argv[i]);
        }
    }
    return 0;
}

static int call(const query_args *a, const char *method, const ProtobufCMessage *req,
                strata_buffer *resp, strata_error *err) {
    strata_buffer packed = STRATA_BUFFER_INIT;
    size_t size = protobuf_c_message_get_packed_size(req);
    if (strata_buffer_reserve(&packed, size) != 0)
        return strata_error_oom(err);
    packed.len = protobuf_c_message_pack(req, packed.data);
    rpc_channel *ch = rpc_channel_new(a->address, &a->channel, err);
    int rc = -1;
    if (ch != NULL) {
        char path[128];
        snprintf(path, sizeof path, QUERY_SERVICE "%s", method);
        rpc_metadata md = {"x-scope-orgid", a->tenant, a->tenant ? strlen(a->tenant) : 0};
        rc = rpc_call_unary(ch, path, packed.data, packed.len, &md, a->tenant ? 1 : 0,
                            60 * STRATA_NS_PER_SEC, resp, err);
        rpc_channel_free(ch);
    }
    strata_buffer_free(&packed);
    return rc;
}

static int time_arg(const char *name, const char *text, int64_t fallback, int64_t *out,
                    strata_error *err) {
    if (text == NULL) {
        *out = fallback;
        return 0;
    }
    return config_parse_time(name, text, strata_now_ns(), out, err);
}

static void set_ts(Google__Protobuf__Timestamp *ts, int64_t ns) {
    google__protobuf__timestamp__init(ts);
    ts->seconds = ns / STRATA_NS_PER_SEC;
    ts->nanos = (int32_t)(ns % STRATA_NS_PER_SEC);
}

/* ---- types, labels, values ---------------------------------------------------------------- */

static int run_types(const query_args *a, strata_error *err) {
    Parca__Query__V1alpha1__ProfileTypesRequest req =
        PARCA__QUERY__V1ALPHA1__PROFILE_TYPES_REQUEST__INIT;
    strata_buffer resp = STRATA_BUFFER_INIT;
    if (call(a, "ProfileTypes", &req.base, &resp, err) != 0) {
        strata_buffer_free(&resp);
        return -1;
    }
    Parca__Query__V1alpha1__ProfileTypesResponse *r =
        parca__query__v1alpha1__profile_types_response__unpack(NULL, resp.len, resp.data);
    strata_buffer_free(&resp);
    if (r == NULL)
        return strata_error_set(err, STRATA_INTERNAL, "bad ProfileTypesResponse");
    for (size_t i = 0; i < r->n_types; i++) {
        Parca__Query__V1alpha1__ProfileType *t = r->types[i];
        printf("%s:%s:%s:%s:%s%s\n", t->name, t->sample_type, t->sample_unit, t->period_type,
               t->period_unit, t->delta ? ":delta" : "");
    }
    parca__query__v1alpha1__profile_types_response__free_unpacked(r, NULL);
    return 0;
}

static int run_labels(const query_args *a, bool values, strata_error *err) {
    strata_buffer resp = STRATA_BUFFER_INIT;
    int rc;
    if (values) {
        if (a->n_positional < 1)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "values needs a label NAME");
        Parca__Query__V1alpha1__ValuesRequest req = PARCA__QUERY__V1ALPHA1__VALUES_REQUEST__INIT;
        req.label_name = (char *)a->positional[0];
        req.n_match = a->n_match;
        req.match = (char **)a->match;
        if (a->type != NULL) {
            req._profile_type_case =
                PARCA__QUERY__V1ALPHA1__VALUES_REQUEST___PROFILE_TYPE_PROFILE_TYPE;
            req.profile_type = (char *)a->type;
        }
        rc = call(a, "Values", &req.base, &resp, err);
    } else {
        Parca__Query__V1alpha1__LabelsRequest req = PARCA__QUERY__V1ALPHA1__LABELS_REQUEST__INIT;
        req.n_match = a->n_match;
        req.match = (char **)a->match;
        if (a->type != NULL) {
            req._profile_type_case =
                PARCA__QUERY__V1ALPHA1__LABELS_REQUEST___PROFILE_TYPE_PROFILE_TYPE;
            req.profile_type = (char *)a->type;
        }
        rc = call(a, "Labels", &req.base, &resp, err);
    }
    if (rc == 0 && values) {
        Parca__Query__V1alpha1__ValuesResponse *r =
            parca__query__v1alpha1__values_response__unpack(NULL, resp.len, resp.data);
        for (size_t i = 0; r != NULL && i < r->n_label_values; i++)
            printf("%s\n", r->label_values[i]);
        if (r == NULL)
            rc = strata_error_set(err, STRATA_INTERNAL, "bad ValuesResponse");
        else
            parca__query__v1alpha1__values_response__free_unpacked(r, NULL);
    } else if (rc == 0) {
        Parca__Query__V1alpha1__LabelsResponse *r =
            parca__query__v1alpha1__labels_response__unpack(NULL, resp.len, resp.data);
        for (size_t i = 0; r != NULL && i < r->n_label_names; i++)
            printf("%s\n", r->label_names[i]);
        if (r == NULL)
            rc = strata_error_set(err, STRATA_INTERNAL, "bad LabelsResponse");
        else
            parca__query__v1alpha1__labels_response__free_unpacked(r, NULL);
    }
    strata_buffer_free(&resp);
    return rc;
}

/* ---- range -------------------------------------------------------------------------------- */

static void print_series(const Parca__Query__V1alpha1__MetricsSeries *s) {
    printf("{");
    for (size_t l = 0; s->labelset != NULL && l < s->labelset->n_labels; l++)
        printf("%s%s=\"%s\"", l ? ", " : "", s->labelset->labels[l]->name,
               s->labelset->labels[l]->value);
    printf("} %s/%s\n", s->sample_type ? s->sample_type->type : "",
           s->sample_type ? s->sample_type->unit : "");
    for (size_t k = 0; k < s->n_samples; k++) {
        const Parca__Query__V1alpha1__MetricsSample *p = s->samples[k];
        int64_t ms =
            p->timestamp ? p->timestamp->seconds * 1000 + p->timestamp->nanos / 1000000 : 0;
        printf("  %lld  value=%lld  per_second=%.6g  duration=%.3fs  count=%d\n", (long long)ms,
               (long long)p->value, p->value_per_second, (double)p->duration / 1e9, p->count);
    }
}

static int run_range(const query_args *a, strata_error *err) {
    if (a->n_positional < 1)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "range needs a QUERY");
    int64_t now = strata_now_ns(), start, end, step;
    if (time_arg("--start", a->start, now - 3600 * STRATA_NS_PER_SEC, &start, err) != 0 ||
        time_arg("--end", a->end, now, &end, err) != 0)
        return -1;
    step = (end - start) / 100 > STRATA_NS_PER_SEC ? (end - start) / 100 : STRATA_NS_PER_SEC;
    if (a->step != NULL && !config_parse_duration(a->step, &step))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "--step: want a duration like 1m");
    Google__Protobuf__Timestamp ts_start, ts_end;
    set_ts(&ts_start, start);
    set_ts(&ts_end, end);
    Google__Protobuf__Duration d = GOOGLE__PROTOBUF__DURATION__INIT;
    d.seconds = step / STRATA_NS_PER_SEC;
    d.nanos = (int32_t)(step % STRATA_NS_PER_SEC);
    Parca__Query__V1alpha1__QueryRangeRequest req =
        PARCA__QUERY__V1ALPHA1__QUERY_RANGE_REQUEST__INIT;
    req.query = (char *)a->positional[0];
    req.start = &ts_start;
    req.end = &ts_end;
    req.step = &d;
    req.n_sum_by = a->n_sum_by;
    req.sum_by = (char **)a->sum_by;
    strata_buffer resp = STRATA_BUFFER_INIT;
    int rc = call(a, "QueryRange", &req.base, &resp, err);
    if (rc == 0) {
        Parca__Query__V1alpha1__QueryRangeResponse *r =
            parca__query__v1alpha1__query_range_response__unpack(NULL, resp.len, resp.data);
        if (r == NULL)
            rc = strata_error_set(err, STRATA_INTERNAL, "bad QueryRangeResponse");
        for (size_t i = 0; r != NULL && i < r->n_series; i++)
            print_series(r->series[i]);
        if (r != NULL)
            parca__query__v1alpha1__query_range_response__free_unpacked(r, NULL);
    }
    strata_buffer_free(&resp);
    return rc;
}

/* ---- merge and diff ----------------------------------------------------------------------- */

static void format_value(int64_t v, const char *unit, char *out, size_t len) {
    double x = (double)v;
    if (strcmp(unit, "nanoseconds") == 0) {
        snprintf(out, len, "%.2fs", x / 1e9);
    } else if (strcmp(unit, "bytes") == 0) {
        const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
        int u = 0;
        while ((x >= 1024 || x <= -1024) && u < 4) {
            x /= 1024;
            u++;
        }
        snprintf(out, len, "%.2f%s", x, units[u]);
    } else {
        snprintf(out, len, "%lld", (long long)v);
    }
}

static void print_top(const Parca__Query__V1alpha1__QueryResponse *r, int top, bool diff) {
    const Parca__Query__V1alpha1__Top *t = r->top;
    const char *unit = t->unit ? t->unit : "";
    char total[32];
    format_value(r->total, unit, total, sizeof total);
    printf("total %s (%s)\n", total, unit);
    printf("%12s %7s %12s %7s%s  %s\n", "flat", "flat%", "cum", "cum%",
           diff ? "          diff" : "", "function");
    for (size_t i = 0; i < t->n_list && (top <= 0 || (int)i < top); i++) {
        const Parca__Query__V1alpha1__TopNode *n = t->list[i];
        char flat[32], cum[32], d[32];
        format_value(n->flat, unit, flat, sizeof flat);
        format_value(n->cumulative, unit, cum, sizeof cum);
        format_value(n->diff, unit, d, sizeof d);
        double tot = r->total != 0 ? (double)r->total : 1;
        const char *name = n->meta && n->meta->function ? n->meta->function->name : "?";
        printf("%12s %6.2f%% %12s %6.2f%%", flat, 100.0 * (double)n->flat / tot, cum,
               100.0 * (double)n->cumulative / tot);
        if (diff)
            printf(" %13s", d);
        printf("  %s\n", name);
    }
}

static int write_output(const char *path, const ProtobufCBinaryData *bytes, strata_error *err) {
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return strata_error_set(err, STRATA_UNAVAILABLE, "cannot write %s", path);
    size_t n = fwrite(bytes->data, 1, bytes->len, f);
    if (fclose(f) != 0 || n != bytes->len)
        return strata_error_set(err, STRATA_UNAVAILABLE, "cannot write %s", path);
    fprintf(stderr, "wrote %zu bytes of pprof to %s\n", bytes->len, path);
    return 0;
}

typedef struct merge_pb {
    Google__Protobuf__Timestamp start, end;
    Parca__Query__V1alpha1__MergeProfile merge;
} merge_pb;

static int fill_merge(merge_pb *m, const char *query, const char *start_text, const char *end_text,
                      strata_error *err) {
    int64_t now = strata_now_ns(), start, end;
    if (time_arg("start", start_text, now - 3600 * STRATA_NS_PER_SEC, &start, err) != 0 ||
        time_arg("end", end_text, now, &end, err) != 0)
        return -1;
    set_ts(&m->start, start);
    set_ts(&m->end, end);
    parca__query__v1alpha1__merge_profile__init(&m->merge);
    m->merge.query = (char *)query;
    m->merge.start = &m->start;
    m->merge.end = &m->end;
    return 0;
}

static int run_query_request(const query_args *a, Parca__Query__V1alpha1__QueryRequest *req,
                             bool diff, strata_error *err) {
    char *fields[8];
    char list[256];
    Parca__Query__V1alpha1__GroupBy group_by = PARCA__QUERY__V1ALPHA1__GROUP_BY__INIT;
    if (a->group_by != NULL) {
        snprintf(list, sizeof list, "%s", a->group_by);
        size_t n = 0;
        for (char *save = NULL, *f = strtok_r(list, ",", &save); f != NULL && n < 8;
             f = strtok_r(NULL, ",", &save))
            fields[n++] = f;
        group_by.fields = fields;
        group_by.n_fields = n;
        req->_group_by_case = PARCA__QUERY__V1ALPHA1__QUERY_REQUEST___GROUP_BY_GROUP_BY;
        req->group_by = &group_by;
    }
    req->report_type = a->output != NULL
                           ? PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_PPROF
                           : PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_TOP;
    strata_buffer resp = STRATA_BUFFER_INIT;
    int rc = call(a, "Query", &req->base, &resp, err);
    if (rc == 0) {
        Parca__Query__V1alpha1__QueryResponse *r =
            parca__query__v1alpha1__query_response__unpack(NULL, resp.len, resp.data);
        if (r == NULL)
            rc = strata_error_set(err, STRATA_INTERNAL, "bad QueryResponse");
        else if (a->output != NULL)
            rc = write_output(a->output, &r->pprof, err);
        else if (r->report_case == PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_TOP)
            print_top(r, a->top, diff);
        if (r != NULL)
            parca__query__v1alpha1__query_response__free_unpacked(r, NULL);
    }
    strata_buffer_free(&resp);
    return rc;
}

static int run_merge(const query_args *a, strata_error *err) {
    if (a->n_positional < 1)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "merge needs a QUERY");
    merge_pb m;
    if (fill_merge(&m, a->positional[0], a->start, a->end, err) != 0)
        return -1;
    Parca__Query__V1alpha1__QueryRequest req = PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__INIT;
    req.mode = PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__MODE__MODE_MERGE;
    req.options_case = PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__OPTIONS_MERGE;
    req.merge = &m.merge;
    return run_query_request(a, &req, false, err);
}

static int run_diff(const query_args *a, strata_error *err) {
    if (a->n_positional < 2)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "diff needs QUERY_A and QUERY_B");
    merge_pb ma, mb;
    if (fill_merge(&ma, a->positional[0], a->start_a ? a->start_a : a->start,
                   a->end_a ? a->end_a : a->end, err) != 0 ||
        fill_merge(&mb, a->positional[1], a->start_b ? a->start_b : a->start,
                   a->end_b ? a->end_b : a->end, err) != 0)
        return -1;
    Parca__Query__V1alpha1__ProfileDiffSelection sa =
        PARCA__QUERY__V1ALPHA1__PROFILE_DIFF_SELECTION__INIT;
    Parca__Query__V1alpha1__ProfileDiffSelection sb =
        PARCA__QUERY__V1ALPHA1__PROFILE_DIFF_SELECTION__INIT;
    sa.mode = sb.mode = PARCA__QUERY__V1ALPHA1__PROFILE_DIFF_SELECTION__MODE__MODE_MERGE;
    sa.options_case = sb.options_case =
        PARCA__QUERY__V1ALPHA1__PROFILE_DIFF_SELECTION__OPTIONS_MERGE;
    sa.merge = &ma.merge;
    sb.merge = &mb.merge;
    Parca__Query__V1alpha1__DiffProfile d = PARCA__QUERY__V1ALPHA1__DIFF_PROFILE__INIT;
    d.a = &sa;
    d.b = &sb;
    if (a->absolute) {
        d._absolute_case = PARCA__QUERY__V1ALPHA1__DIFF_PROFILE___ABSOLUTE_ABSOLUTE;
        d.absolute = 1;
    }
    Parca__Query__V1alpha1__QueryRequest req = PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__INIT;
    req.mode = PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__MODE__MODE_DIFF;
    req.options_case = PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__OPTIONS_DIFF;
    req.diff = &d;
    return run_query_request(a, &req, true, err);
}

int cli_query(int argc, char **argv) {
    if (argc < 1) {
        fprintf(stderr, "usage: strata query types|labels|values|range|merge|diff ...\n");
        return 2;
    }
    query_args a;
    strata_error err;
    strata_error_clear(&err);
    if (parse_query_args(argc - 1, argv + 1, &a, &err) != 0) {
        fprintf(stderr, "strata query: %s\n", err.message);
        return 2;
    }
    const char *sub = argv[0];
    int rc;
    if (strcmp(sub, "types") == 0)
        rc = run_types(&a, &err);
    else if (strcmp(sub, "labels") == 0)
        rc = run_labels(&a, false, &err);
    else if (strcmp(sub, "values") == 0)
        rc = run_labels(&a, true, &err);
    else if (strcmp(sub, "range") == 0)
        rc = run_range(&a, &err);
    else if (strcmp(sub, "merge") == 0)
        rc = run_merge(&a, &err);
    else if (strcmp(sub, "diff") == 0)
        rc = run_diff(&a, &err);
    else {
        fprintf(stderr, "strata query: unknown subcommand \"%s\"\n", sub);
        return 2;
    }
    if (rc != 0) {
        fprintf(stderr, "strata query %s: %s: %s\n", sub, strata_status_name(err.code),
                err.message);
        return 1;
    }
    return 0;
}
