/*
 * discovery.c - target group helpers: construction, deep copies and the group/target label
 * overlay every consumer applies before relabeling.
 */
#include "discovery.h"

#include <stdlib.h>
#include <string.h>

#include "common/array.h"

int target_group_init(target_group *group, const char *source, strata_error *err) {
    memset(group, 0, sizeof *group);
    if ((group->source = strdup(source)) == NULL)
        return strata_error_oom(err);
    return 0;
}

label_set *target_group_add_target(target_group *group, strata_error *err) {
    if (STRATA_ARRAY_RESERVE_OR_OOM(group->targets, group->cap_targets, group->n_targets + 1,
                                    err) != 0)
        return NULL;
    label_set *target = &group->targets[group->n_targets++];
    *target = (label_set)LABEL_SET_INIT;
    return target;
}

int target_group_copy(target_group *dst, const target_group *src, strata_error *err) {
    if (target_group_init(dst, src->source, err) != 0)
        return -1;
    if (label_set_copy(&dst->labels, &src->labels, err) != 0)
        goto fail;
    for (size_t i = 0; i < src->n_targets; i++) {
        label_set *target = target_group_add_target(dst, err);
        if (target == NULL || label_set_copy(target, &src->targets[i], err) != 0)
            goto fail;
    }
    return 0;
fail:
    target_group_free(dst);
    return -1;
}

void target_group_free(target_group *group) {
    if (group == NULL)
        return;
    free(group->source);
    label_set_free(&group->labels);
    for (size_t i = 0; i < group->n_targets; i++)
        label_set_free(&group->targets[i]);
    free(group->targets);
    memset(group, 0, sizeof *group);
}

void target_groups_free(target_group *groups, size_t n) {
    for (size_t i = 0; i < n; i++)
        target_group_free(&groups[i]);
    free(groups);
}

int target_group_merge_labels(const target_group *group, size_t target_index, label_set *out,
                              strata_error *err) {
    label_set_clear(out);
    const label_set *target = &group->targets[target_index];
    for (size_t i = 0; i < target->count; i++) {
        const strata_label *l = &target->labels[i];
        if (label_set_add(out, l->name, strlen(l->name), l->value, strlen(l->value), err) != 0)
            return -1;
    }
    for (size_t i = 0; i < group->labels.count; i++) {
        const strata_label *l = &group->labels.labels[i];
        if (label_set_get(target, l->name) == NULL &&
            label_set_add(out, l->name, strlen(l->name), l->value, strlen(l->value), err) != 0)
            return -1;
    }
    label_set_sort(out);
    return 0;
}
