/*
 * cfi_fuzz.c - libFuzzer target for cfi.c's section parser, which reads .eh_frame,
 * .eh_frame_hdr and .debug_frame from any file a profiled process maps. The first byte picks the
 * mode (bit 0: .debug_frame) and a row bound (bits 1-7: max_rows, 0 for none); the rest is the
 * section, at link-time address 0x1000. Properties checked beyond no crash or UB: the same input
 * parses twice to the same table, a table's pcs strictly increase with no two equal neighbours
 * and stay within the bound, and a failure is INVALID_ARGUMENT or (with a bound)
 * RESOURCE_EXHAUSTED. The same bytes are also read as an .eh_frame_hdr (at 0x800) over the
 * section, streamed: chunks arrive in order and within AGENT_CFI_CHUNK_ROWS unless one FDE
 * overlaps the next by more, and the same properties hold.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cfi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool same_rules(const struct agent_unwind_row *p, const struct agent_unwind_row *q) {
    return p->cfa_type == q->cfa_type && p->cfa_offset == q->cfa_offset &&
           p->rbp_type == q->rbp_type && p->rbp_offset == q->rbp_offset;
}

static void check_row(const struct agent_unwind_row *prev, const struct agent_unwind_row *r) {
    if (r->cfa_type > AGENT_CFA_END || r->rbp_type > AGENT_RBP_LOST)
        abort();
    if (prev != NULL && (prev->pc >= r->pc || same_rules(prev, r)))
        abort();
}

static void check_failure(const strata_error *err, size_t max_rows) {
    if (err->code != STRATA_INVALID_ARGUMENT &&
        !(max_rows != 0 && err->code == STRATA_RESOURCE_EXHAUSTED))
        abort();
}

typedef struct stream_check {
    struct agent_unwind_row last;
    size_t n;
} stream_check;

static int check_chunk(void *ctx, const struct agent_unwind_row *rows, size_t n,
                       strata_error *err) {
    (void)err;
    stream_check *c = ctx;
    if (n == 0)
        abort();
    for (size_t i = 0; i < n; i++) {
        check_row(c->n + i > 0 ? (i > 0 ? &rows[i - 1] : &c->last) : NULL, &rows[i]);
    }
    c->last = rows[n - 1];
    c->n += n;
    return 0;
}

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
        for (size_t i = 0; i < a.n_rows; i++)
            check_row(i > 0 ? &a.rows[i - 1] : NULL, &a.rows[i]);
    } else {
        check_failure(&err_a, max_rows);
        if (err_a.code != err_b.code || strcmp(err_a.message, err_b.message) != 0)
            abort();
    }
    agent_cfi_table_free(&a);
    agent_cfi_table_free(&b);

    agent_cfi_source src = {.frame = data + 1,
                            .frame_size = size - 1,
                            .frame_vaddr = 0x1000,
                            .is_debug_frame = debug_frame,
                            .hdr = data + 1,
                            .hdr_size = size - 1,
                            .hdr_vaddr = 0x800};
    stream_check c = {.n = 0};
    agent_cfi_counts counts;
    strata_error err_c;
    if (agent_cfi_stream(&src, max_rows, check_chunk, &c, &counts, &err_c) == 0) {
        if (counts.rows != c.n || (max_rows != 0 && c.n > max_rows))
            abort();
    } else {
        check_failure(&err_c, max_rows);
    }
    return 0;
}
