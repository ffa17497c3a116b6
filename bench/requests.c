/*
 * requests.c - see requests.h.
 */
#include "requests.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentgen.h"
#include "parca/profilestore/v1alpha1/profilestore.pb-c.h"

void die(const char *what, const strata_error *err) {
    fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what,
            err != NULL ? err->message : "failed");
    exit(1);
}

/* Serializes one WriteRawRequest with one series per (labels, name, pprof). */
static void encode_request_named(label_set *labels, const char *const *names, strata_buffer *pprofs,
                                 size_t n, strata_buffer *out) {
    Parca__Profilestore__V1alpha1__RawProfileSeries *series = calloc(n, sizeof *series);
    Parca__Profilestore__V1alpha1__RawProfileSeries **series_ptrs = calloc(n, sizeof *series_ptrs);
    Parca__Profilestore__V1alpha1__LabelSet *sets = calloc(n, sizeof *sets);
    Parca__Profilestore__V1alpha1__RawSample *samples = calloc(n, sizeof *samples);
    Parca__Profilestore__V1alpha1__RawSample **sample_ptrs = calloc(n, sizeof *sample_ptrs);
    size_t max_labels = 1;
    for (size_t i = 0; i < n; i++)
        if (labels[i].count + 1 > max_labels)
            max_labels = labels[i].count + 1;
    Parca__Profilestore__V1alpha1__Label *lab = calloc(n * max_labels, sizeof *lab);
    Parca__Profilestore__V1alpha1__Label **lab_ptrs = calloc(n * max_labels, sizeof *lab_ptrs);
    if (!series || !series_ptrs || !sets || !samples || !sample_ptrs || !lab || !lab_ptrs)
        die("out of memory", NULL);
    for (size_t i = 0; i < n; i++) {
        Parca__Profilestore__V1alpha1__Label *l = &lab[i * max_labels];
        Parca__Profilestore__V1alpha1__Label **lp = &lab_ptrs[i * max_labels];
        parca__profilestore__v1alpha1__label__init(&l[0]);
        l[0].name = "__name__";
        l[0].value = (char *)names[i];
        lp[0] = &l[0];
        for (size_t k = 0; k < labels[i].count; k++) {
            parca__profilestore__v1alpha1__label__init(&l[k + 1]);
            l[k + 1].name = labels[i].labels[k].name;
            l[k + 1].value = labels[i].labels[k].value;
            lp[k + 1] = &l[k + 1];
        }
        parca__profilestore__v1alpha1__label_set__init(&sets[i]);
        sets[i].n_labels = labels[i].count + 1;
        sets[i].labels = lp;
        parca__profilestore__v1alpha1__raw_sample__init(&samples[i]);
        samples[i].raw_profile.data = pprofs[i].data;
        samples[i].raw_profile.len = pprofs[i].len;
        sample_ptrs[i] = &samples[i];
        parca__profilestore__v1alpha1__raw_profile_series__init(&series[i]);
        series[i].labels = &sets[i];
        series[i].n_samples = 1;
        series[i].samples = &sample_ptrs[i];
        series_ptrs[i] = &series[i];
    }
    Parca__Profilestore__V1alpha1__WriteRawRequest req =
        PARCA__PROFILESTORE__V1ALPHA1__WRITE_RAW_REQUEST__INIT;
    req.n_series = n;
    req.series = series_ptrs;
    size_t size = parca__profilestore__v1alpha1__write_raw_request__get_packed_size(&req);
    if (strata_buffer_reserve(out, size) != 0)
        die("out of memory", NULL);
    out->len = parca__profilestore__v1alpha1__write_raw_request__pack(&req, out->data);
    free(series);
    free(series_ptrs);
    free(sets);
    free(samples);
    free(sample_ptrs);
    free(lab);
    free(lab_ptrs);
}

void encode_request(label_set *labels, const char *name, strata_buffer *pprofs, size_t n,
                    strata_buffer *out) {
    const char **names = calloc(n, sizeof *names);
    if (names == NULL)
        die("out of memory", NULL);
    for (size_t i = 0; i < n; i++)
        names[i] = name;
    encode_request_named(labels, names, pprofs, n, out);
    free(names);
}

static void read_whole_file(const char *path, strata_buffer *out) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "%s: cannot open %s: %s\n", program_invocation_short_name, path,
                strerror(errno));
        exit(1);
    }
    uint8_t chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (strata_buffer_append(out, chunk, n) != 0)
            die("out of memory", NULL);
    fclose(f);
}

void build_file_requests(const pprof_file *files, size_t n_files, size_t targets,
                         size_t series_per_request, size_t n_requests, request_set *set) {
    strata_buffer *raw = calloc(n_files, sizeof *raw);
    uint64_t *per = calloc(n_files, sizeof *per), *per_pprof = calloc(n_files, sizeof *per_pprof);
    label_set *labels = calloc(series_per_request, sizeof *labels);
    strata_buffer *pprofs = calloc(series_per_request, sizeof *pprofs);
    const char **names = calloc(series_per_request, sizeof *names);
    set->requests = calloc(n_requests, sizeof *set->requests);
    if (!raw || !per || !per_pprof || !labels || !pprofs || !names || !set->requests)
        die("out of memory", NULL);
    strata_error err;
    for (size_t f = 0; f < n_files; f++) {
        read_whole_file(files[f].path, &raw[f]);
        pprof_profile prof;
        if (pprof_decode(raw[f].data, raw[f].len, NULL, &prof, &err) != 0)
            die(files[f].path, &err);
        per[f] = count_samples(&prof);
        per_pprof[f] = count_pprof_samples(&prof);
        pprof_profile_free(&prof);
    }
    for (size_t r = 0; r < n_requests; r++) {
        for (size_t j = 0; j < series_per_request; j++) {
            size_t g = r * series_per_request + j, f = g % n_files;
            char instance[32];
            snprintf(instance, sizeof instance, "target-%zu", (g / n_files) % targets);
            labels[j] = (label_set)LABEL_SET_INIT;
            if (label_set_add(&labels[j], "job", 3, "fleet", 5, &err) != 0 ||
                label_set_add(&labels[j], "instance", 8, instance, strlen(instance), &err) != 0)
                die("labels", &err);
            names[j] = files[f].name;
            pprofs[j] = raw[f]; /* borrowed: encode_request_named only reads it */
            set->samples += per[f];
            set->pprof_samples += per_pprof[f];
            set->pprof_bytes += raw[f].len;
        }
        encode_request_named(labels, names, pprofs, series_per_request, &set->requests[r]);
        for (size_t j = 0; j < series_per_request; j++)
            label_set_free(&labels[j]);
    }
    set->n = n_requests;
    for (size_t f = 0; f < n_files; f++)
        strata_buffer_free(&raw[f]);
    free(raw);
    free(per);
    free(per_pprof);
    free(labels);
    free(pprofs);
    free(names);
}

uint64_t count_samples(const pprof_profile *p) {
    uint64_t n = 0;
    for (size_t s = 0; s < p->n_samples; s++)
        for (size_t t = 0; t < p->n_sample_types; t++)
            n += pprof_sample_value(p, s, t) != 0;
    return n;
}

uint64_t count_pprof_samples(const pprof_profile *p) {
    uint64_t n = 0;
    for (size_t s = 0; s < p->n_samples; s++) {
        bool any = false;
        for (size_t t = 0; t < p->n_sample_types; t++)
            any |= pprof_sample_value(p, s, t) != 0;
        n += any;
    }
    return n;
}

/* Writes a gzipped pprof to DIR/w<window>-p<process>.pb.gz (for `go tool pprof`). */
static void dump_pprof(const char *dir, size_t window, size_t process, const strata_buffer *gz) {
    char path[4096];
    snprintf(path, sizeof path, "%s/w%05zu-p%04zu.pb.gz", dir, window, process);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(gz->data, 1, gz->len, f) != gz->len || fclose(f) != 0)
        die(path, NULL);
}

void build_agent_requests_split(size_t windows, size_t processes, size_t per_request,
                                int64_t start_ns, const char *dump_dir, request_set *set) {
    strata_error err;
    agentgen_options o;
    agentgen_options_default(&o);
    o.n_processes = processes;
    if (per_request == 0 || per_request > processes)
        per_request = processes;
    agentgen *g = agentgen_new(&o, &err);
    if (g == NULL)
        die("agentgen", &err);
    size_t chunks = (processes + per_request - 1) / per_request;
    set->requests = calloc(windows * chunks, sizeof *set->requests);
    label_set *labels = calloc(processes, sizeof *labels);
    strata_buffer *pprofs = calloc(processes, sizeof *pprofs);
    if (set->requests == NULL || labels == NULL || pprofs == NULL)
        die("out of memory", NULL);
    for (size_t p = 0; p < processes; p++)
        if (agentgen_labels(g, p, &labels[p], &err) != 0)
            die("labels", &err);
    profile_type t = agentgen_profile_type();
    for (size_t w = 0; w < windows; w++) {
        for (size_t p = 0; p < processes; p++) {
            pprof_profile prof;
            if (agentgen_profile(g, p, w, &prof, &err) != 0)
                die("profile", &err);
            prof.time_nanos += start_ns;
            set->samples += count_samples(&prof);
            set->pprof_samples += count_pprof_samples(&prof);
            strata_buffer_reset(&pprofs[p]);
            if (pprof_encode(&prof, true, &pprofs[p], &err) != 0)
                die("encode", &err);
            set->pprof_bytes += pprofs[p].len;
            pprof_profile_free(&prof);
            if (dump_dir != NULL)
                dump_pprof(dump_dir, w, p, &pprofs[p]);
        }
        for (size_t c = 0; c < chunks; c++) {
            size_t first = c * per_request;
            size_t n = processes - first < per_request ? processes - first : per_request;
            encode_request(labels + first, t.name, pprofs + first, n,
                           &set->requests[w * chunks + c]);
        }
    }
    set->n = windows * chunks;
    for (size_t p = 0; p < processes; p++) {
        label_set_free(&labels[p]);
        strata_buffer_free(&pprofs[p]);
    }
    free(labels);
    free(pprofs);
    agentgen_free(g);
}

void build_file_requests_split(const pprof_file *files, size_t n_files, size_t windows,
                               size_t targets, size_t per_request, int64_t start_ns,
                               const char *dump_dir, request_set *set) {
    if (per_request == 0 || per_request > targets)
        per_request = targets;
    size_t chunks = (targets + per_request - 1) / per_request;
    pprof_profile *decoded = calloc(n_files, sizeof *decoded);
    strata_buffer *raw = calloc(n_files, sizeof *raw);
    label_set *labels = calloc(targets, sizeof *labels);
    strata_buffer *pprofs = calloc(targets, sizeof *pprofs);
    const char **names = calloc(targets, sizeof *names);
    set->requests = calloc(windows * chunks, sizeof *set->requests);
    if (!decoded || !raw || !labels || !pprofs || !names || !set->requests)
        die("out of memory", NULL);
    strata_error err;
    for (size_t f = 0; f < n_files; f++) {
        read_whole_file(files[f].path, &raw[f]);
        if (pprof_decode(raw[f].data, raw[f].len, NULL, &decoded[f], &err) != 0)
            die(files[f].path, &err);
    }
    for (size_t t = 0; t < targets; t++) {
        char instance[32];
        snprintf(instance, sizeof instance, "target-%zu", t);
        labels[t] = (label_set)LABEL_SET_INIT;
        if (label_set_add(&labels[t], "job", 3, "go-fleet", 8, &err) != 0 ||
            label_set_add(&labels[t], "instance", 8, instance, strlen(instance), &err) != 0)
            die("labels", &err);
    }
    for (size_t w = 0; w < windows; w++) {
        for (size_t t = 0; t < targets; t++) {
            size_t f = (t + w) % n_files;
            pprof_profile *prof = &decoded[f];
            prof->time_nanos = start_ns + (int64_t)(10 * w + t % 10) * INT64_C(1000000000);
            prof->duration_nanos = INT64_C(10000000000);
            set->samples += count_samples(prof);
            set->pprof_samples += count_pprof_samples(prof);
            strata_buffer_reset(&pprofs[t]);
            if (pprof_encode(prof, true, &pprofs[t], &err) != 0)
                die("encode", &err);
            set->pprof_bytes += pprofs[t].len;
            names[t] = files[f].name;
            if (dump_dir != NULL)
                dump_pprof(dump_dir, w, t, &pprofs[t]);
        }
        for (size_t c = 0; c < chunks; c++) {
            size_t first = c * per_request;
            size_t n = targets - first < per_request ? targets - first : per_request;
            encode_request_named(labels + first, names + first, pprofs + first, n,
                                 &set->requests[w * chunks + c]);
        }
    }
    set->n = windows * chunks;
    for (size_t f = 0; f < n_files; f++) {
        pprof_profile_free(&decoded[f]);
        strata_buffer_free(&raw[f]);
    }
    for (size_t t = 0; t < targets; t++) {
        label_set_free(&labels[t]);
        strata_buffer_free(&pprofs[t]);
    }
    free(decoded);
    free(raw);
    free(labels);
    free(pprofs);
    free(names);
}

/* One request per 10 s window holding every process's profile, as a node's agents would send. */
void build_agent_requests(size_t windows, size_t processes, request_set *set) {
    build_agent_requests_split(windows, processes, processes, 0, NULL, set);
}

void free_set(request_set *set) {
    for (size_t i = 0; i < set->n; i++)
        strata_buffer_free(&set->requests[i]);
    free(set->requests);
}
