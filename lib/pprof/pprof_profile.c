/*
 * pprof_profile.c - the in-memory profile: id indexes, lookups and freeing. Decoding lives in
 * pprof_decode.c and encoding in pprof_encode.c.
 *
 * Go and most producers number ids 1..n, so an id index is usually a direct table of n+1 entries;
 * when the largest id is much larger than the count (sparse ids), a hash map is used instead.
 */
#include "pprof/pprof.h"

#include <stdlib.h>
#include <string.h>

static void id_index_free(pprof_id_index *ix) {
    free(ix->dense);
    strata_u64_map_free(&ix->sparse);
    memset(ix, 0, sizeof *ix);
}

static int id_index_build(pprof_id_index *ix, const char *what, size_t count, const void *items,
                          size_t stride, strata_error *err) {
    id_index_free(ix);
    uint64_t max_id = 0;
    for (size_t i = 0; i < count; i++) {
        uint64_t id;
        memcpy(&id, (const uint8_t *)items + i * stride, sizeof id); /* id is the first field */
        if (id == 0)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s %zu has id 0", what, i);
        if (id > max_id)
            max_id = id;
    }
    if (count == 0)
        return 0;
    if (max_id <= 4 * (uint64_t)count + 64) {
        ix->dense = calloc((size_t)max_id + 1, sizeof *ix->dense);
        if (ix->dense == NULL)
            return strata_error_oom(err);
        ix->dense_len = (size_t)max_id + 1;
        for (size_t i = 0; i < count; i++) {
            uint64_t id;
            memcpy(&id, (const uint8_t *)items + i * stride, sizeof id);
            if (ix->dense[id] != 0)
                return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s id %llu is defined twice",
                                        what, (unsigned long long)id);
            ix->dense[id] = (uint32_t)i + 1;
        }
        return 0;
    }
    if (strata_u64_map_init(&ix->sparse, count) != 0)
        return strata_error_oom(err);
    for (size_t i = 0; i < count; i++) {
        uint64_t id;
        memcpy(&id, (const uint8_t *)items + i * stride, sizeof id);
        bool inserted;
        if (strata_u64_map_upsert(&ix->sparse, id, i, &inserted) == NULL)
            return strata_error_oom(err);
        if (!inserted)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s id %llu is defined twice",
                                    what, (unsigned long long)id);
    }
    return 0;
}

static long id_index_lookup(const pprof_id_index *ix, uint64_t id) {
    if (ix->dense != NULL) {
        if (id >= ix->dense_len || ix->dense[id] == 0)
            return -1;
        return (long)ix->dense[id] - 1;
    }
    if (id == 0)
        return -1;
    const uint64_t *v = strata_u64_map_get(&ix->sparse, id);
    return v == NULL ? -1 : (long)*v;
}

int pprof_profile_build_indexes(pprof_profile *p, strata_error *err) {
    if (id_index_build(&p->location_index, "location", p->n_locations, p->locations,
                       sizeof *p->locations, err) != 0)
        return -1;
    if (id_index_build(&p->function_index, "function", p->n_functions, p->functions,
                       sizeof *p->functions, err) != 0)
        return -1;
    return id_index_build(&p->mapping_index, "mapping", p->n_mappings, p->mappings,
                          sizeof *p->mappings, err);
}

const pprof_location *pprof_find_location(const pprof_profile *p, uint64_t id) {
    long i = id_index_lookup(&p->location_index, id);
    return i < 0 ? NULL : &p->locations[i];
}

const pprof_function *pprof_find_function(const pprof_profile *p, uint64_t id) {
    long i = id_index_lookup(&p->function_index, id);
    return i < 0 ? NULL : &p->functions[i];
}

const pprof_mapping *pprof_find_mapping(const pprof_profile *p, uint64_t id) {
    long i = id_index_lookup(&p->mapping_index, id);
    return i < 0 ? NULL : &p->mappings[i];
}

pprof_string pprof_string_at(const pprof_profile *p, int64_t i) {
    if (i < 0 || (uint64_t)i >= p->n_strings) {
        pprof_string empty = {"", 0};
        return empty;
    }
    return p->strings[i];
}

void pprof_profile_free(pprof_profile *p) {
    free(p->sample_types);
    free(p->samples);
    free(p->sample_location_ids);
    free(p->sample_values);
    free(p->sample_labels);
    free(p->mappings);
    free(p->locations);
    free(p->lines);
    free(p->functions);
    free(p->strings);
    free(p->comments);
    free(p->owned_bytes);
    id_index_free(&p->location_index);
    id_index_free(&p->function_index);
    id_index_free(&p->mapping_index);
    memset(p, 0, sizeof *p);
}
