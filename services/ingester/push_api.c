/*
 * push_api.c - Pyroscope's Push as Parca's WriteRaw (push_api.h).
 *
 * The two messages differ only in shape: Push's series sit in field 1 with their labels as a
 * bare list and an ID beside each profile; WriteRaw's sit in field 2 with their labels wrapped in
 * a LabelSet. The translation points into the unpacked request (no copy of the profiles' bytes)
 * and packs the WriteRawRequest once.
 */
#include <stdlib.h>

#include "parca/profilestore/v1alpha1/profilestore.pb-c.h"
#include "push/v1/push.pb-c.h"
#include "push_api.h"
#include "pyroscope_ingest.h"

typedef Parca__Profilestore__V1alpha1__RawProfileSeries parca_series;
typedef Parca__Profilestore__V1alpha1__LabelSet parca_label_set;
typedef Parca__Profilestore__V1alpha1__Label parca_label;
typedef Parca__Profilestore__V1alpha1__RawSample parca_sample;

/* Everything the translation allocates, freed together. */
typedef struct translation {
    parca_series *series;
    parca_series **series_ptrs;
    parca_label_set *sets;
    parca_label *labels;
    parca_label **label_ptrs;
    parca_sample *samples;
    parca_sample **sample_ptrs;
} translation;

static void translation_free(translation *t) {
    free(t->series);
    free(t->series_ptrs);
    free(t->sets);
    free(t->labels);
    free(t->label_ptrs);
    free(t->samples);
    free(t->sample_ptrs);
}

static int translate(const Push__V1__PushRequest *push, translation *t,
                     Parca__Profilestore__V1alpha1__WriteRawRequest *out) {
    size_t n = push->n_series, n_labels = 0, n_samples = 0;
    for (size_t i = 0; i < n; i++) {
        n_labels += push->series[i]->n_labels;
        n_samples += push->series[i]->n_samples;
    }
    t->series = calloc(n + 1, sizeof *t->series);
    t->series_ptrs = calloc(n + 1, sizeof *t->series_ptrs);
    t->sets = calloc(n + 1, sizeof *t->sets);
    t->labels = calloc(n_labels + 1, sizeof *t->labels);
    t->label_ptrs = calloc(n_labels + 1, sizeof *t->label_ptrs);
    t->samples = calloc(n_samples + 1, sizeof *t->samples);
    t->sample_ptrs = calloc(n_samples + 1, sizeof *t->sample_ptrs);
    if (!t->series || !t->series_ptrs || !t->sets || !t->labels || !t->label_ptrs || !t->samples ||
        !t->sample_ptrs)
        return -1;
    size_t l = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        const Push__V1__RawProfileSeries *in = push->series[i];
        parca_label_set *set = &t->sets[i];
        *set = (parca_label_set)PARCA__PROFILESTORE__V1ALPHA1__LABEL_SET__INIT;
        set->labels = &t->label_ptrs[l];
        set->n_labels = in->n_labels;
        for (size_t k = 0; k < in->n_labels; k++, l++) {
            t->labels[l] = (parca_label)PARCA__PROFILESTORE__V1ALPHA1__LABEL__INIT;
            pyroscope_sanitize_label_name(in->labels[k]->name); /* as /ingest */
            t->labels[l].name = in->labels[k]->name;
            t->labels[l].value = in->labels[k]->value;
            t->label_ptrs[l] = &t->labels[l];
        }
        parca_series *series = &t->series[i];
        *series = (parca_series)PARCA__PROFILESTORE__V1ALPHA1__RAW_PROFILE_SERIES__INIT;
        series->labels = set;
        series->samples = &t->sample_ptrs[s];
        series->n_samples = in->n_samples;
        for (size_t k = 0; k < in->n_samples; k++, s++) {
            t->samples[s] = (parca_sample)PARCA__PROFILESTORE__V1ALPHA1__RAW_SAMPLE__INIT;
            t->samples[s].raw_profile = in->samples[k]->raw_profile;
            t->sample_ptrs[s] = &t->samples[s];
        }
        t->series_ptrs[i] = series;
    }
    out->series = t->series_ptrs;
    out->n_series = n;
    return 0;
}

int push_to_write_raw(const uint8_t *request, size_t len, strata_buffer *out, strata_error *err) {
    Push__V1__PushRequest *push = push__v1__push_request__unpack(NULL, len, request);
    if (push == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "the request is not a push.v1.PushRequest");
    translation t = {0};
    Parca__Profilestore__V1alpha1__WriteRawRequest raw =
        PARCA__PROFILESTORE__V1ALPHA1__WRITE_RAW_REQUEST__INIT;
    int rc = translate(push, &t, &raw) != 0 ? strata_error_oom(err) : 0;
    if (rc == 0 && strata_buffer_reserve(out, protobuf_c_message_get_packed_size(&raw.base)) != 0)
        rc = strata_error_oom(err);
    if (rc == 0)
        out->len += protobuf_c_message_pack(&raw.base, out->data + out->len);
    translation_free(&t);
    push__v1__push_request__free_unpacked(push, NULL);
    return rc;
}
