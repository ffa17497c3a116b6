/*
 * cfi_fuzz.c - libFuzzer target for cfi.c's section parser, which reads .eh_frame and
 * .debug_frame from any file a profiled process maps. The first byte picks the mode (bit 0:
 * .debug_frame) and a row bound (bits 1-7: max_rows, 0 for none); the rest is the section, at
 * link-time address 0x1000. Properties checked beyond no crash or UB: the same input parses twice
 * to the same table, a table's pcs strictly increase with no two equal neighbours and stay within
 * the bound, and a failure is INVALID_ARGUMENT or (with a bound) RESOURCE_EXHAUSTED.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cfi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0)
        return 0;
    bool debug_frame = (data[0] & 1) != 0;
    size_t max_rows = data[0] >> 1;
    agent_cfi_table a, b;
    strata_error err_a, err_b;
    int rc_a =
        agent_cfi_parse_section(data + 1, size - 1, 0x1000, debug_frame, max_rows, &a, &err_a);
    int rc_b =
        agent_cfi_parse_section(data + 1, size - 1, 0x1000, debug_frame, max_rows, &b, &err_b);
    if (rc_a != rc_b)
        abort();
    if (rc_a == 0) {
        if (a.n_rows != b.n_rows || a.n_fdes != b.n_fdes ||
            (a.n_rows > 0 && memcmp(a.rows, b.rows, a.n_rows * sizeof a.rows[0]) != 0))
            abort();
        if (max_rows != 0 && a.n_rows > max_rows)
            abort();
        for (size_t i = 1; i < a.n_rows; i++) {
            const struct agent_unwind_row *p = &a.rows[i - 1], *q = &a.rows[i];
            if (p->pc >= q->pc)
                abort();
            if (p->cfa_type == q->cfa_type && p->cfa_offset == q->cfa_offset &&
                p->rbp_type == q->rbp_type && p->rbp_offset == q->rbp_offset)
                abort();
        }
        for (size_t i = 0; i < a.n_rows; i++)
            if (a.rows[i].cfa_type > AGENT_CFA_END || a.rows[i].rbp_type > AGENT_RBP_LOST)
                abort();
    } else {
        bool ok = err_a.code == STRATA_INVALID_ARGUMENT ||
                  (max_rows != 0 && err_a.code == STRATA_RESOURCE_EXHAUSTED);
        if (!ok || err_a.code != err_b.code || strcmp(err_a.message, err_b.message) != 0)
            abort();
    }
    agent_cfi_table_free(&a);
    agent_cfi_table_free(&b);
    return 0;
}
