/*
 * engine_samples.c - which series and samples of a block a selector picks, for every operation
 * (engine_internal.h): series by their labels and by the pprof sample labels their samples carry,
 * and the per-sample view that ranges and merges read rows through (sample-label filters, label
 * and time frames).
 *
 * Parca keeps a pprof sample's labels in the namespace of its series' labels, a sample label
 * whose name the series also has being seen as exported_<name>. So the value of label `name` for
 * a sample of series `series` with sample labels `set` is the series' own value if it has the
 * label, else the sample's.
 */
#include "engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"

/* ---- pprof sample labels in the series' namespace ---------------------------------------- */

/* The sample's own label `name` as seen in that namespace (NULL when absent), for a name the
 * series lacks: exported_<x> is the sample's x when the series has x. */
static const char *sample_label(const label_set *series, const label_set *set, const char *name) {
    size_t prefix = sizeof EXPORTED_PREFIX - 1;
    if (strncmp(name, EXPORTED_PREFIX, prefix) == 0 && label_set_get(series, name + prefix) != NULL)
        return label_set_get(set, name + prefix);
    if (label_set_get(series, name) != NULL)
        return NULL; /* the sample's label of that name is exported_<name> */
    return label_set_get(set, name);
}

static const char *label_value(const label_set *series, const label_set *set, const char *name) {
    const char *v = label_set_get(series, name);
    return v != NULL ? v : sample_label(series, set, name);
}

/* True when some matcher of sel names a label the series lacks: in a block with sample labels,
 * such matchers are applied to each sample's labels. */
bool engine_has_sample_matchers(const selector *sel, const label_set *series) {
    for (size_t i = 0; sel != NULL && i < sel->n_matchers; i++)
        if (label_set_get(series, sel->matchers[i].name) == NULL)
            return true;
    return false;
}

/* Whether a sample of the series with labels `set` passes the matchers naming labels the series
 * lacks (the others were checked on the series). */
bool engine_sample_matches(const selector *sel, const label_set *series, const label_set *set) {
    for (size_t i = 0; sel != NULL && i < sel->n_matchers; i++) {
        const label_matcher *m = &sel->matchers[i];
        if (label_set_get(series, m->name) != NULL)
            continue;
        if (!label_matcher_matches(m, sample_label(series, set, m->name)))
            return false;
    }
    return true;
}

/* Whether sample labels can change what sel matches in r: some matcher names a sample label of
 * the block (or exported_<x> for one). When none does, every sample lacks every matcher's label,
 * and the series postings decide exactly as in a version 1 block. */
int engine_matchers_name_sample_labels(block_reader *r, const selector *sel, bool *out,
                                       strata_error *err) {
    *out = false;
    size_t prefix = sizeof EXPORTED_PREFIX - 1;
    for (size_t i = 0; sel != NULL && !*out && i < sel->n_matchers; i++) {
        const char *name = sel->matchers[i].name;
        if (block_reader_has_sample_label_name(r, name, out, err) != 0)
            return -1;
        if (!*out && strncmp(name, EXPORTED_PREFIX, prefix) == 0 &&
            block_reader_has_sample_label_name(r, name + prefix, out, err) != 0)
            return -1;
    }
    return 0;
}

/* Series selection in a block with sample labels: a series matches when its own labels pass the
 * matchers naming them and some sample can pass the others (one of the series' label sets, or
 * none: the series' list does not say whether it also has samples without labels). */
static int select_with_sample_labels(block_reader *r, const selector *sel, uint32_t **ids,
                                     size_t *n, strata_error *err) {
    size_t count = block_reader_series_count(r);
    *ids = malloc((count + 1) * sizeof **ids);
    *n = 0;
    if (*ids == NULL)
        return strata_error_oom(err);
    static const label_set none = LABEL_SET_INIT;
    for (uint32_t s = 0; s < count; s++) {
        const label_set *labels = block_reader_series_labels(r, s);
        if (sel->has_profile_type &&
            !profile_type_equal(&sel->profile_type, block_reader_series_type(r, s)))
            continue;
        bool ok = true;
        for (size_t i = 0; ok && i < sel->n_matchers; i++) {
            const char *v = label_set_get(labels, sel->matchers[i].name);
            ok = v == NULL || label_matcher_matches(&sel->matchers[i], v);
        }
        if (ok && engine_has_sample_matchers(sel, labels)) {
            ok = engine_sample_matches(sel, labels, &none);
            const uint32_t *sets;
            size_t n_sets;
            if (!ok && block_reader_series_label_sets(r, s, &sets, &n_sets, err) != 0)
                return -1;
            for (size_t k = 0; !ok && k < n_sets; k++) {
                const label_set *set;
                if (block_reader_label_set(r, sets[k], &set, err) != 0)
                    return -1;
                ok = engine_sample_matches(sel, labels, set);
            }
        }
        if (ok)
            (*ids)[(*n)++] = s;
    }
    return 0;
}

/* ---- series selection shared by every operation ------------------------------------------- */

/* Series ids of r matching sel (and type when given), ascending. */
int engine_select_series(block_reader *r, const selector *sel, const profile_type *type,
                         uint32_t **ids, size_t *n, strata_error *err) {
    bool by_samples = false;
    if (engine_matchers_name_sample_labels(r, sel, &by_samples, err) != 0)
        return -1;
    if (by_samples) {
        if (select_with_sample_labels(r, sel, ids, n, err) != 0) {
            free(*ids);
            *ids = NULL;
            return -1;
        }
    } else if (sel != NULL) {
        if (block_reader_select(r, sel, ids, n, err) != 0)
            return -1;
    } else {
        size_t count = block_reader_series_count(r);
        *ids = malloc((count + 1) * sizeof **ids);
        if (*ids == NULL)
            return strata_error_oom(err);
        for (uint32_t i = 0; i < count; i++)
            (*ids)[i] = i;
        *n = count;
    }
    if (type == NULL)
        return 0;
    size_t kept = 0;
    for (size_t i = 0; i < *n; i++)
        if (profile_type_equal(block_reader_series_type(r, (*ids)[i]), type))
            (*ids)[kept++] = (*ids)[i];
    *n = kept;
    return 0;
}

/* ---- per-sample view: sample-label filters and label frames -------------------------------- */
void sample_view_free(sample_view *v) {
    strata_u64_map_free(&v->cache);
    strata_u64_map_free(&v->time_frames);
    free(v->by_set);
    free(v->stamp);
    free(v->labels);
    free(v->names);
}

/* Sets up the view for the given profiles of r (any order); tree may be NULL when not grouping. */
int sample_view_init(sample_view *v, block_reader *r, const selector *sel, calltree *tree,
                     const block_profile *profiles, size_t n, strata_error *err) {
    memset(v, 0, sizeof *v);
    v->r = r;
    v->sel = sel;
    v->tree = tree;
    if (tree != NULL && calltree_grouping_has_labels(calltree_get_grouping(tree)))
        v->grouping = calltree_get_grouping(tree);
    bool by_samples = false;
    if (engine_matchers_name_sample_labels(r, sel, &by_samples, err) != 0)
        return -1;
    uint32_t last = UINT32_MAX;
    for (size_t i = 0; by_samples && !v->filter && i < n; i++) {
        if (profiles[i].series_id == last)
            continue;
        last = profiles[i].series_id;
        v->filter = engine_has_sample_matchers(sel, block_reader_series_labels(r, last));
    }
    v->by_time = tree != NULL && calltree_get_grouping(tree)->by_timestamp;
    if (v->by_time && strata_u64_map_init(&v->time_frames, 64) != 0)
        return strata_error_oom(err);
    v->active = v->filter || v->grouping != NULL || v->by_time;
    if (!v->active)
        return 0;
    v->n_sets = block_reader_label_set_count(r) + 1;
    v->by_set = malloc(v->n_sets * sizeof *v->by_set);
    v->stamp = calloc(v->n_sets, sizeof *v->stamp);
    if (v->by_set == NULL || v->stamp == NULL || strata_u64_map_init(&v->cache, 64) != 0)
        return strata_error_oom(err);
    return 0;
}

static int view_add_label(sample_view *v, size_t *n, const char *name, const char *value,
                          bool exported, strata_error *err) {
    for (size_t i = 0; i < *n; i++)
        if (exported ? (strncmp(v->labels[i].name.ptr, EXPORTED_PREFIX,
                                sizeof EXPORTED_PREFIX - 1) == 0 &&
                        strcmp(v->labels[i].name.ptr + sizeof EXPORTED_PREFIX - 1, name) == 0)
                     : strcmp(v->labels[i].name.ptr, name) == 0)
            return 0; /* named already */
    if (*n == v->cap_labels) {
        size_t cap = strata_array_capacity(v->cap_labels, *n + 1);
        calltree_label *labels = strata_array_resize(v->labels, cap, sizeof *labels);
        if (labels == NULL)
            return strata_error_oom(err);
        v->labels = labels;
        char **names = strata_array_resize(v->names, cap, sizeof *names);
        if (names == NULL)
            return strata_error_oom(err);
        v->names = names;
        v->cap_labels = cap;
    }
    v->names[*n] = NULL;
    if (exported) {
        size_t len = sizeof EXPORTED_PREFIX - 1 + strlen(name);
        if ((v->names[*n] = malloc(len + 1)) == NULL)
            return strata_error_oom(err);
        snprintf(v->names[*n], len + 1, "%s%s", EXPORTED_PREFIX, name);
    }
    v->labels[*n].name = calltree_cstr(exported ? v->names[*n] : name);
    v->labels[*n].value = calltree_cstr(value);
    (*n)++;
    return 0;
}

/* The label frame of a sample of the series with sample labels `set`: the labels grouped by
 * that it has (every sample label for bare `labels`, named as in the namespace; `labels.<name>`
 * from the series or the sample), or VIEW_NO_FRAME when it has none of them. */
static int view_label_frame(sample_view *v, const label_set *series, const label_set *set,
                            uint32_t *frame, strata_error *err) {
    size_t n = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && v->grouping->all_labels && i < set->count; i++) {
        const strata_label *l = &set->labels[i];
        rc = view_add_label(v, &n, l->name, l->value, label_set_get(series, l->name) != NULL, err);
    }
    for (size_t i = 0; rc == 0 && i < v->grouping->n_labels; i++) {
        const char *name = v->grouping->labels[i];
        const char *value = label_value(series, set, name);
        if (value != NULL && value[0] != '\0')
            rc = view_add_label(v, &n, name, value, false, err);
    }
    *frame = VIEW_NO_FRAME;
    if (rc == 0 && n > 0)
        rc = calltree_intern_label_frame(v->tree, v->labels, n, frame, err);
    for (size_t i = 0; i < n; i++)
        free(v->names[i]);
    return rc;
}

/* Whether a sample of `series` with label set `set` passes, and its label frame (VIEW_NO_FRAME:
 * none). */
int sample_view_lookup(sample_view *v, uint32_t series, uint32_t set, bool *pass, uint32_t *frame,
                       strata_error *err) {
    uint64_t key = ((uint64_t)series << 32 | set) + 1;
    const uint64_t *known = strata_u64_map_get(&v->cache, key);
    if (known == NULL) {
        const label_set *labels = block_reader_series_labels(v->r, series), *sample;
        if (labels == NULL)
            return strata_error_set(err, STRATA_DATA_LOSS, "series %u out of range", series);
        if (block_reader_label_set(v->r, set, &sample, err) != 0)
            return -1;
        bool ok = !v->filter || engine_sample_matches(v->sel, labels, sample);
        uint32_t f = VIEW_NO_FRAME;
        if (ok && v->grouping != NULL && view_label_frame(v, labels, sample, &f, err) != 0)
            return -1;
        uint64_t value = (uint64_t)f << 1 | (ok ? 1u : 0u);
        if ((known = strata_u64_map_upsert(&v->cache, key, value, NULL)) == NULL)
            return strata_error_oom(err);
    }
    *pass = (*known & 1) != 0;
    *frame = (uint32_t)(*known >> 1);
    return 0;
}

/* The time frame of profile p's samples (grouping by timestamp), interned once per time. */
int sample_view_time_frame(sample_view *v, const block_profile *p, uint32_t *frame,
                           strata_error *err) {
    uint64_t key = (uint64_t)p->time_ns + 1; /* key 0 is the map's empty slot */
    if (key == 0) /* time -1 wraps to it: interned directly (the same frame, found each time) */
        return calltree_intern_time_frame(v->tree, p->time_ns, p->duration_ns, frame, err);
    const uint64_t *known = strata_u64_map_get(&v->time_frames, key);
    if (known != NULL) {
        *frame = (uint32_t)(*known - 1);
        return 0;
    }
    if (calltree_intern_time_frame(v->tree, p->time_ns, p->duration_ns, frame, err) != 0)
        return -1;
    if (strata_u64_map_upsert(&v->time_frames, key, (uint64_t)*frame + 1, NULL) == NULL)
        return strata_error_oom(err);
    return 0;
}
