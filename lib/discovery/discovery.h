/*
 * discovery.h - target groups: what a service-discovery provider tells its consumer.
 *
 * Design, as Prometheus's discovery manager does it. A provider (a static list, a watched file,
 * the Kubernetes API) knows a number of *sources* - one file, one pod - and each source yields a
 * group of targets. A target is a label set that holds at least `__address__` (host:port) and any
 * `__meta_*` labels the provider sets; the group's own labels apply to every target in it (a
 * target's label wins over a group label of the same name).
 *
 * A provider calls its discovery_update_fn whenever some sources change, passing only the groups
 * of those sources. A group with no targets means "this source is gone" (a deleted file, a removed
 * pod): the consumer forgets what it had from that source. The first call after start lists every
 * source the provider knows. The callback runs on the provider's thread; the groups are only valid
 * during the call (the consumer copies what it keeps).
 */
#ifndef STRATA_DISCOVERY_H
#define STRATA_DISCOVERY_H

#include <stddef.h>

#include "common/error.h"
#include "labels/labels.h"

/* The label every target carries: host:port to scrape. */
#define DISCOVERY_ADDRESS_LABEL "__address__"

typedef struct target_group {
    char *source;     /* unique within its provider, e.g. "pod/default/api-7f9c" or a file path */
    label_set labels; /* common to every target of the group */
    label_set *targets;
    size_t n_targets; /* 0: the source is gone */
    size_t cap_targets;
} target_group;

typedef void (*discovery_update_fn)(void *ctx, const target_group *groups, size_t n_groups);

/* Sets source and empties the rest. */
int target_group_init(target_group *group, const char *source, strata_error *err);
/* Appends an empty target and returns it (NULL on allocation failure). */
label_set *target_group_add_target(target_group *group, strata_error *err);
/* Deep copy into *dst (overwritten). */
int target_group_copy(target_group *dst, const target_group *src, strata_error *err);
void target_group_free(target_group *group);
/* Frees n groups and the array. */
void target_groups_free(target_group *groups, size_t n);

/* The labels one target ends up with before relabeling: the group's labels overlaid with the
 * target's own (target wins), sorted. *out is overwritten. */
int target_group_merge_labels(const target_group *group, size_t target_index, label_set *out,
                              strata_error *err);

#endif
