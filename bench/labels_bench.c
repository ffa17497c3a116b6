/*
 * labels_bench.c - what pprof sample labels cost in blocks (format version 2), against the same
 * profiles without them.
 *
 *   labels_bench [--minutes M] [--processes N] [--zstd-level L] [--seed S]
 *
 * The profiles are bench/agentgen's agent-like CPU profiles (N processes, one 2,000-stack pprof
 * each per 10 s), written four times, each time with other sample labels added to every pprof
 * before it goes through block_writer_add_profile (the ingester's path):
 *   - none:     the profiles as generated (a version 1 block, as before labels existed);
 *   - endpoint: each sample gets endpoint=<one of 8>, chosen by its leaf's address, so a code
 *               path always serves the same endpoint (as pprof.Do around request handlers gives);
 *   - split:    each sample is split in two with endpoint=/a and endpoint=/b (its value shared),
 *               the worst case of low cardinality: every stack under every endpoint;
 *   - trace:    each sample gets its own span_id (unique per sample and profile), the worst case of
 *               high cardinality (what per-request tags would give).
 * As block_bench: level-1 blocks of one second of ingest (about N/10 profiles each, no rollups, as
 * the ingester writes them) and one compacted block of everything (with rollups, as the compactor
 * writes it). Reported per variant: block rows (pprof samples after summing equal (stack, labels)
 * pairs), bytes (data objects and meta.json), bytes per row, and bytes per sample of the unlabelled
 * profiles (the same CPU time: what the labels cost for the same data), plus writer CPU.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentgen.h"
#include "block/block_writer.h"
#include "common/clock.h"
#include "common/hash.h"

enum { MODE_NONE, MODE_ENDPOINT, MODE_SPLIT, MODE_TRACE, N_MODES };
static const char *const mode_names[N_MODES] = {"none", "endpoint", "split", "trace"};

#define N_ENDPOINTS 8
static const char *const endpoints[N_ENDPOINTS] = {
    "/checkout", "/browse", "/cart", "/search", "/login", "/api/v1/items", "/health", "/metrics"};

typedef struct bench_args {
    double minutes;
    size_t processes;
    int zstd_level;
    uint64_t seed;
} bench_args;

typedef struct variant {
    uint64_t rows_small, rows_large;
    uint64_t small_bytes, large_bytes;
    int64_t cpu_ns;
} variant;

static void die(const char *what, const strata_error *err) {
    fprintf(stderr, "labels_bench: %s: %s\n", what, err->message);
    exit(1);
}

static void *grow(void *p, size_t n, size_t elem) {
    void *q = realloc(p, (n ? n : 1) * elem);
    if (q == NULL) {
        fprintf(stderr, "labels_bench: out of memory\n");
        exit(1);
    }
    return q;
}

static int64_t add_string(pprof_profile *p, const char *s) {
    p->strings = grow(p->strings, p->n_strings + 1, sizeof *p->strings);
    p->strings[p->n_strings] = (pprof_string){s, (uint32_t)strlen(s)};
    return (int64_t)p->n_strings++;
}

/* Adds the mode's labels to every sample of p. span_ids holds the text of trace ids (one per
 * sample, kept alive until p is freed). */
static void add_labels(pprof_profile *p, int mode, uint64_t window, size_t process,
                       char (**span_ids)[24]) {
    if (mode == MODE_NONE)
        return;
    size_t n = p->n_samples;
    int64_t key = add_string(p, mode == MODE_TRACE ? "span_id" : "endpoint");
    int64_t values[N_ENDPOINTS];
    for (int i = 0; i < N_ENDPOINTS; i++)
        values[i] = add_string(p, endpoints[i]);
    size_t n_out = mode == MODE_SPLIT ? 2 * n : n;
    p->sample_labels = grow(p->sample_labels, n_out, sizeof *p->sample_labels);
    if (mode == MODE_TRACE)
        *span_ids = grow(*span_ids, n, sizeof **span_ids);
    if (mode == MODE_SPLIT) {
        p->samples = grow(p->samples, n_out, sizeof *p->samples);
        p->sample_values = grow(p->sample_values, n_out * p->n_sample_types, sizeof(int64_t));
    }
    for (size_t i = 0; i < n; i++) {
        pprof_sample *s = &p->samples[i];
        pprof_label *l = &p->sample_labels[i];
        memset(l, 0, sizeof *l);
        l->key = key;
        if (mode == MODE_ENDPOINT) {
            uint64_t leaf = s->location_count > 0 ? p->sample_location_ids[s->location_offset] : 0;
            const pprof_location *loc = pprof_find_location(p, leaf);
            uint64_t h = strata_hash_u64(loc != NULL ? loc->address : leaf);
            l->str = values[h % N_ENDPOINTS];
        } else if (mode == MODE_TRACE) {
            snprintf((*span_ids)[i], sizeof(*span_ids)[i], "%016" PRIx64,
                     strata_hash_u64((window << 40) ^ ((uint64_t)process << 20) ^ i));
            l->str = add_string(p, (*span_ids)[i]);
        } else { /* split: this half /checkout, the copy /browse */
            l->str = values[0];
            pprof_sample *copy = &p->samples[n + i];
            *copy = *s;
            copy->value_offset = (uint32_t)((n + i) * p->n_sample_types);
            for (size_t t = 0; t < p->n_sample_types; t++) {
                int64_t *v = &p->sample_values[s->value_offset + t];
                p->sample_values[copy->value_offset + t] = *v - *v / 2;
                *v /= 2;
            }
            pprof_label *cl = &p->sample_labels[n + i];
            *cl = *l;
            cl->str = values[1];
            copy->label_offset = (uint32_t)(n + i);
            copy->label_count = 1;
        }
        s->label_offset = (uint32_t)i;
        s->label_count = 1;
    }
    p->n_sample_labels = n_out;
    p->n_samples = n_out;
}

static block_writer *new_writer(int level, int zstd_level, bool rollups, strata_error *err) {
    block_writer_options o;
    block_writer_options_default(&o);
    o.compaction_level = level;
    o.zstd_level = zstd_level;
    o.write_rollups = rollups;
    block_writer *w = block_writer_new(&o, err);
    if (w == NULL)
        die("writer", err);
    return w;
}

static uint64_t finish(block_writer *w, variant *v, strata_error *err) {
    strata_buffer data = STRATA_BUFFER_INIT, json = STRATA_BUFFER_INIT;
    block_meta meta;
    int64_t t0 = strata_process_cpu_ns();
    if (block_writer_finish(w, &data, &meta, err) != 0)
        die("finish", err);
    v->cpu_ns += strata_process_cpu_ns() - t0;
    if (block_meta_encode(&meta, &json, err) != 0)
        die("meta", err);
    uint64_t bytes = data.len + json.len;
    strata_buffer_free(&data);
    strata_buffer_free(&json);
    block_meta_free(&meta);
    return bytes;
}

static void add(block_writer *w, const label_set *labels, const pprof_profile *p, int64_t time_ns,
                variant *v, strata_error *err) {
    profile_type type = agentgen_profile_type();
    int64_t t0 = strata_process_cpu_ns();
    if (block_writer_add_profile(w, labels, &type, time_ns, 10 * STRATA_NS_PER_SEC, p->period, p, 0,
                                 err) != 0)
        die("add_profile", err);
    v->cpu_ns += strata_process_cpu_ns() - t0;
}

static void run_mode(agentgen *g, const bench_args *a, const label_set *labels, int mode,
                     variant *v, strata_error *err) {
    block_writer *large = new_writer(3, a->zstd_level, true, err);
    uint64_t windows = (uint64_t)(a->minutes * 6.0 + 0.5);
    char(*span_ids)[24] = NULL;
    for (uint64_t win = 0; win < windows; win++) {
        for (size_t sub = 0; sub < 10; sub++) { /* one second of ingest: one level-1 block */
            block_writer *small = NULL;
            for (size_t i = sub; i < a->processes; i += 10) {
                pprof_profile p;
                memset(&p, 0, sizeof p);
                if (agentgen_profile(g, i, win, &p, err) != 0)
                    die("generate", err);
                add_labels(&p, mode, win, i, &span_ids);
                int64_t time_ns = (int64_t)(win * 10 + sub) * STRATA_NS_PER_SEC;
                if (small == NULL)
                    small = new_writer(1, a->zstd_level, false, err);
                add(small, &labels[i], &p, time_ns, v, err);
                add(large, &labels[i], &p, time_ns, v, err);
                pprof_profile_free(&p);
            }
            if (small != NULL) {
                v->rows_small += block_writer_sample_count(small);
                v->small_bytes += finish(small, v, err);
                block_writer_free(small);
            }
        }
    }
    v->rows_large = block_writer_sample_count(large);
    v->large_bytes = finish(large, v, err);
    block_writer_free(large);
    free(span_ids);
}

static int parse_args(int argc, char **argv, bench_args *a) {
    a->minutes = 10;
    a->processes = 20;
    a->zstd_level = 3;
    a->seed = 42;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--minutes") == 0)
            a->minutes = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--processes") == 0)
            a->processes = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--zstd-level") == 0)
            a->zstd_level = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--seed") == 0)
            a->seed = (uint64_t)atoll(argv[i + 1]);
        else
            return -1;
    }
    return a->minutes > 0 && a->processes > 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    bench_args a;
    if (parse_args(argc, argv, &a) != 0) {
        fprintf(stderr, "usage: labels_bench [--minutes M] [--processes N] [--zstd-level L] "
                        "[--seed S]\n");
        return 2;
    }
    strata_error err;
    agentgen_options go;
    agentgen_options_default(&go);
    go.n_processes = a.processes;
    go.seed = a.seed;
    agentgen *g = agentgen_new(&go, &err);
    if (g == NULL)
        die("agentgen", &err);
    label_set *labels = calloc(a.processes, sizeof *labels);
    if (labels == NULL)
        return 1;
    for (size_t i = 0; i < a.processes; i++)
        if (agentgen_labels(g, i, &labels[i], &err) != 0)
            die("labels", &err);
    variant v[N_MODES];
    memset(v, 0, sizeof v);
    printf("agent-like data: %.1f min, %zu processes, zstd level %d; bytes are data objects plus "
           "meta.json\n",
           a.minutes, a.processes, a.zstd_level);
    printf("%-9s %-9s %12s %14s %10s %16s %10s\n", "labels", "blocks", "rows", "bytes", "bytes/row",
           "bytes/sample(*)", "vs none");
    for (int mode = 0; mode < N_MODES; mode++) {
        run_mode(g, &a, labels, mode, &v[mode], &err);
        const char *kind[2] = {"level-1", "compacted"};
        uint64_t rows[2] = {v[mode].rows_small, v[mode].rows_large};
        uint64_t bytes[2] = {v[mode].small_bytes, v[mode].large_bytes};
        uint64_t base[2] = {v[0].small_bytes, v[0].large_bytes};
        uint64_t base_rows[2] = {v[0].rows_small, v[0].rows_large};
        for (int k = 0; k < 2; k++)
            printf("%-9s %-9s %12" PRIu64 " %14" PRIu64 " %10.2f %16.2f %9.1f%%\n",
                   mode_names[mode], kind[k], rows[k], bytes[k], (double)bytes[k] / (double)rows[k],
                   (double)bytes[k] / (double)base_rows[k],
                   100.0 * ((double)bytes[k] / (double)base[k] - 1.0));
        printf("%-9s writer CPU %.2f s\n", mode_names[mode], (double)v[mode].cpu_ns / 1e9);
    }
    printf("(*) bytes per sample of the unlabelled profiles: the same data, with its labels\n");
    for (size_t i = 0; i < a.processes; i++)
        label_set_free(&labels[i]);
    free(labels);
    agentgen_free(g);
    return 0;
}
