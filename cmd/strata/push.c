/*
 * push.c - `strata push FILE... [--label k=v]... [--address HOST:PORT] [--tenant T]` (and the TLS
 * and token flags of cli_channel_flag): sends pprof
 * files to an ingester through WriteRaw, one series holding all the files. The series needs a
 * profile name: --label __name__=NAME, or --name NAME (default "process_cpu" for CPU profiles is
 * not guessed: the name is required so nothing lands under a surprising type).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common/array.h"
#include "common/buffer.h"
#include "common/clock.h"
#include "parca/profilestore/v1alpha1/profilestore.pb-c.h"
#include "rpc/rpc.h"

typedef Parca__Profilestore__V1alpha1__Label label_pb;

typedef struct push_args {
    const char *address;
    const char *tenant;
    const char *name;
    const char **files;
    size_t n_files;
    char **label_names;
    char **label_values;
    size_t n_labels, cap_labels; /* label_names and label_values share cap_labels */
    int64_t timeout_ns;
    rpc_channel_options channel; /* --tls... and --bearer-token-file */
} push_args;

static int read_file(const char *path, strata_buffer *out, strata_error *err) {
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return strata_error_set(err, STRATA_NOT_FOUND, "cannot open %s", path);
    uint8_t chunk[65536];
    size_t n;
    int rc = 0;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (strata_buffer_append(out, chunk, n) != 0) {
            rc = strata_error_oom(err);
            break;
        }
    if (rc == 0 && ferror(f))
        rc = strata_error_set(err, STRATA_UNKNOWN, "cannot read %s", path);
    fclose(f);
    return rc;
}

static int add_label_arg(push_args *a, const char *text, strata_error *err) {
    const char *eq = strchr(text, '=');
    if (eq == NULL || eq == text)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "--label wants NAME=VALUE, got \"%s\"", text);
    if (a->n_labels == a->cap_labels) {
        size_t cap = strata_array_capacity(a->cap_labels, a->n_labels + 1);
        char **names = strata_array_resize(a->label_names, cap, sizeof *names);
        if (names == NULL)
            return strata_error_oom(err);
        a->label_names = names;
        char **values = strata_array_resize(a->label_values, cap, sizeof *values);
        if (values == NULL)
            return strata_error_oom(err);
        a->label_values = values;
        a->cap_labels = cap;
    }
    a->label_names[a->n_labels] = strndup(text, (size_t)(eq - text));
    a->label_values[a->n_labels] = strdup(eq + 1);
    a->n_labels++;
    if (a->label_names[a->n_labels - 1] == NULL || a->label_values[a->n_labels - 1] == NULL)
        return strata_error_oom(err);
    return 0;
}

static void push_args_free(push_args *a) {
    for (size_t i = 0; i < a->n_labels; i++) {
        free(a->label_names[i]);
        free(a->label_values[i]);
    }
    free(a->label_names);
    free(a->label_values);
    free(a->files);
}

static int parse_push_args(int argc, char **argv, push_args *a, strata_error *err) {
    a->address = "127.0.0.1:7071";
    a->timeout_ns = 30 * STRATA_NS_PER_SEC;
    a->files = calloc((size_t)argc + 1, sizeof *a->files);
    if (a->files == NULL)
        return strata_error_oom(err);
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        int took = cli_channel_flag(arg, value, &a->channel, err);
        if (took < 0)
            return -1;
        if (took > 0) {
            i += took - 1;
            continue;
        }
        if (cli_flag_is(arg, "label") || cli_flag_is(arg, "address") ||
            cli_flag_is(arg, "tenant") || cli_flag_is(arg, "name")) {
            if (value == NULL)
                return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s needs a value", arg);
            i++;
            if (cli_flag_is(arg, "label") && add_label_arg(a, value, err) != 0)
                return -1;
            if (cli_flag_is(arg, "address"))
                a->address = value;
            if (cli_flag_is(arg, "tenant"))
                a->tenant = value;
            if (cli_flag_is(arg, "name"))
                a->name = value;
        } else if (arg[0] == '-' && arg[1] != '\0') {
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "unknown flag %s", arg);
        } else {
            a->files[a->n_files++] = arg;
        }
    }
    if (a->n_files == 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "no pprof files given");
    if (a->name != NULL && add_label_arg(a, "__name__=", err) == 0) {
        free(a->label_values[a->n_labels - 1]);
        if ((a->label_values[a->n_labels - 1] = strdup(a->name)) == NULL)
            return strata_error_oom(err);
    }
    return 0;
}

/* Builds and serializes the WriteRawRequest. */
static int encode_request(const push_args *a, strata_buffer *files, strata_buffer *out,
                          strata_error *err) {
    label_pb *labels = calloc(a->n_labels + 1, sizeof *labels);
    label_pb **label_ptrs = calloc(a->n_labels + 1, sizeof *label_ptrs);
    Parca__Profilestore__V1alpha1__RawSample *samples = calloc(a->n_files, sizeof *samples);
    Parca__Profilestore__V1alpha1__RawSample **sample_ptrs =
        calloc(a->n_files, sizeof *sample_ptrs);
    int rc = -1;
    if (labels == NULL || label_ptrs == NULL || samples == NULL || sample_ptrs == NULL) {
        strata_error_oom(err);
        goto out;
    }
    for (size_t i = 0; i < a->n_labels; i++) {
        parca__profilestore__v1alpha1__label__init(&labels[i]);
        labels[i].name = a->label_names[i];
        labels[i].value = a->label_values[i];
        label_ptrs[i] = &labels[i];
    }
    for (size_t i = 0; i < a->n_files; i++) {
        parca__profilestore__v1alpha1__raw_sample__init(&samples[i]);
        samples[i].raw_profile.data = files[i].data;
        samples[i].raw_profile.len = files[i].len;
        sample_ptrs[i] = &samples[i];
    }
    Parca__Profilestore__V1alpha1__LabelSet set = PARCA__PROFILESTORE__V1ALPHA1__LABEL_SET__INIT;
    set.n_labels = a->n_labels;
    set.labels = label_ptrs;
    Parca__Profilestore__V1alpha1__RawProfileSeries series =
        PARCA__PROFILESTORE__V1ALPHA1__RAW_PROFILE_SERIES__INIT;
    series.labels = &set;
    series.n_samples = a->n_files;
    series.samples = sample_ptrs;
    Parca__Profilestore__V1alpha1__RawProfileSeries *series_ptr = &series;
    Parca__Profilestore__V1alpha1__WriteRawRequest req =
        PARCA__PROFILESTORE__V1ALPHA1__WRITE_RAW_REQUEST__INIT;
    req.n_series = 1;
    req.series = &series_ptr;
    size_t size = parca__profilestore__v1alpha1__write_raw_request__get_packed_size(&req);
    if (strata_buffer_reserve(out, size) != 0) {
        strata_error_oom(err);
        goto out;
    }
    out->len = parca__profilestore__v1alpha1__write_raw_request__pack(&req, out->data);
    rc = 0;
out:
    free(labels);
    free(label_ptrs);
    free(samples);
    free(sample_ptrs);
    return rc;
}

static int send_request(const push_args *a, const strata_buffer *request, strata_error *err) {
    rpc_channel *ch = rpc_channel_new(a->address, &a->channel, err);
    if (ch == NULL)
        return -1;
    rpc_metadata md = {"x-scope-orgid", a->tenant, a->tenant != NULL ? strlen(a->tenant) : 0};
    strata_buffer response = STRATA_BUFFER_INIT;
    int rc = rpc_call_unary(ch, "/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw",
                            request->data, request->len, &md, a->tenant != NULL ? 1 : 0,
                            a->timeout_ns, &response, err);
    strata_buffer_free(&response);
    rpc_channel_free(ch);
    return rc;
}

int cli_push(int argc, char **argv) {
    push_args a;
    memset(&a, 0, sizeof a);
    strata_error err;
    strata_error_clear(&err);
    strata_buffer request = STRATA_BUFFER_INIT;
    strata_buffer *files = NULL;
    int rc = 1;
    if (parse_push_args(argc, argv, &a, &err) != 0)
        goto out;
    files = calloc(a.n_files, sizeof *files);
    if (files == NULL) {
        strata_error_oom(&err);
        goto out;
    }
    for (size_t i = 0; i < a.n_files; i++)
        if (read_file(a.files[i], &files[i], &err) != 0)
            goto out;
    if (encode_request(&a, files, &request, &err) != 0 || send_request(&a, &request, &err) != 0)
        goto out;
    printf("pushed %zu profile%s to %s\n", a.n_files, a.n_files == 1 ? "" : "s", a.address);
    rc = 0;
out:
    if (rc != 0)
        fprintf(stderr, "strata push: %s: %s\n", strata_status_name(err.code), err.message);
    for (size_t i = 0; files != NULL && i < a.n_files; i++)
        strata_buffer_free(&files[i]);
    free(files);
    strata_buffer_free(&request);
    push_args_free(&a);
    return rc;
}
