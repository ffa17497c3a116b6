/*
 * discovery_test.c - tests for target groups: copies are deep and the group/target label overlay
 * lets the target win.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "discovery/discovery.h"

static void add(label_set *set, const char *name, const char *value) {
    assert_int_equal(label_set_add(set, name, strlen(name), value, strlen(value), NULL), 0);
}

static void test_merge_labels_target_wins(void **state) {
    (void)state;
    target_group g;
    assert_int_equal(target_group_init(&g, "file.yaml:0", NULL), 0);
    add(&g.labels, "env", "prod");
    add(&g.labels, "job", "group");
    label_set *t = target_group_add_target(&g, NULL);
    assert_non_null(t);
    add(t, DISCOVERY_ADDRESS_LABEL, "10.0.0.1:6060");
    add(t, "job", "target");

    label_set out = LABEL_SET_INIT;
    assert_int_equal(target_group_merge_labels(&g, 0, &out, NULL), 0);
    assert_int_equal(out.count, 3);
    assert_string_equal(out.labels[0].name, "__address__");
    assert_string_equal(out.labels[0].value, "10.0.0.1:6060");
    assert_string_equal(label_set_get(&out, "env"), "prod");
    assert_string_equal(label_set_get(&out, "job"), "target");
    label_set_free(&out);
    target_group_free(&g);
}

static void test_copy_is_deep(void **state) {
    (void)state;
    target_group g, copy;
    assert_int_equal(target_group_init(&g, "pod/default/api", NULL), 0);
    add(target_group_add_target(&g, NULL), DISCOVERY_ADDRESS_LABEL, "a:1");
    add(target_group_add_target(&g, NULL), DISCOVERY_ADDRESS_LABEL, "b:2");
    assert_int_equal(target_group_copy(&copy, &g, NULL), 0);
    target_group_free(&g);
    assert_string_equal(copy.source, "pod/default/api");
    assert_int_equal(copy.n_targets, 2);
    assert_string_equal(label_set_get(&copy.targets[1], DISCOVERY_ADDRESS_LABEL), "b:2");
    target_group_free(&copy);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_labels_target_wins),
        cmocka_unit_test(test_copy_is_deep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
