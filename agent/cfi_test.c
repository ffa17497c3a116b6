/*
 * cfi_test.c - tests of cfi.c, the CFI to unwind-row parser.
 *
 * The oracle for real files is binutils' `readelf -wF`, which prints each FDE's interpreted CFA
 * table (LOC, CFA, one column per register, ra). The test parses that listing, maps every row
 * through the rules of unwind.h on its own (rsp+N, rbp+N; "exp" in a .plt* section is the PLT
 * rule, elsewhere FP; ra "u" ends the walk, anything but c-8 is FP; rbp c-N is saved at CFA - N,
 * "u" or "s" or no column is unchanged), applies the table's override and gap rules to the FDEs,
 * and compares the expected row with the parser's at every LOC readelf printed, the address
 * before it, and every FDE's first byte, last byte and end. Files: libc, libstdc++, libgcc_s and
 * this test binary (skipped with a note when absent).
 *
 * Hand-assembled sections cover each instruction and encoding, .debug_frame (versions 1 and 4,
 * 32- and 64-bit), the table's override, gap and merge rules, and malformed input, which must be
 * INVALID_ARGUMENT and never a crash (every prefix and many byte flips of a valid section are
 * parsed too; valgrind checks the reads). libelf writes small ELF files for the .debug_frame
 * fallback and the non-x86-64 refusal.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cfi.h"
#include "common/array.h"

/* ---- a tiny assembler for CFI sections ---- */

typedef struct bytes {
    uint8_t b[1 << 16];
    size_t n;
} bytes;

static void put8(bytes *s, uint64_t v) {
    assert_true(s->n < sizeof s->b);
    s->b[s->n++] = (uint8_t)v;
}

static void put_le(bytes *s, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; i++)
        put8(s, v >> (8 * i));
}

static void put_mem(bytes *s, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        put8(s, ((const uint8_t *)p)[i]);
}

static void put_uleb(bytes *s, uint64_t v) {
    do {
        uint8_t b = v & 0x7f;
        v >>= 7;
        put8(s, b | (v != 0 ? 0x80 : 0));
    } while (v != 0);
}

static void put_sleb(bytes *s, int64_t v) {
    for (;;) {
        uint8_t b = (uint8_t)(v & 0x7f);
        v >>= 7; /* arithmetic on gcc and clang */
        bool done = (v == 0 && !(b & 0x40)) || (v == -1 && (b & 0x40));
        put8(s, b | (done ? 0 : 0x80));
        if (done)
            return;
    }
}

/* Patches the 4-byte length at off to cover up to the end. */
static void close_entry32(bytes *s, size_t off) {
    uint64_t len = s->n - off - 4;
    for (size_t i = 0; i < 4; i++)
        s->b[off + i] = (uint8_t)(len >> (8 * i));
}

#define VADDR 0x1000u
#define INSNS(...) (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})

/* The usual GCC CIE: "zR", code 1, data -8, ra 16, FDE pointers pcrel|sdata4, CFA rsp+8 and the
 * return address at CFA-8. Returns its offset. */
static size_t eh_cie_with(bytes *s, const char *aug, const uint8_t *augdata, size_t n_augdata,
                          uint64_t code_align, const uint8_t *insns, size_t n_insns) {
    size_t off = s->n;
    put_le(s, 0, 4);
    put_le(s, 0, 4); /* CIE id */
    put8(s, 1);      /* version */
    put_mem(s, aug, strlen(aug) + 1);
    put_uleb(s, code_align);
    put_sleb(s, -8);
    put8(s, 16);
    if (aug[0] == 'z') {
        put_uleb(s, n_augdata);
        put_mem(s, augdata, n_augdata);
    }
    put_mem(s, insns, n_insns);
    close_entry32(s, off);
    return off;
}

static size_t eh_cie(bytes *s) {
    return eh_cie_with(s, "zR", INSNS(0x1b), 1, INSNS(0x0c, 0x07, 0x08, 0x90, 0x01));
}

/* An FDE for [start, start + len) with pcrel|sdata4 pointers and no augmentation data. */
static size_t eh_fde(bytes *s, size_t cie, uint64_t start, uint64_t len, const uint8_t *insns,
                     size_t n_insns) {
    size_t off = s->n;
    put_le(s, 0, 4);
    put_le(s, s->n - cie, 4);
    put_le(s, (uint64_t)(start - (VADDR + s->n)), 4);
    put_le(s, len, 4);
    put_uleb(s, 0);
    put_mem(s, insns, n_insns);
    close_entry32(s, off);
    return off;
}

typedef struct want {
    uint64_t pc;
    int cfa_type;
    int32_t cfa_offset;
    int rbp_type;
    int16_t rbp_offset;
} want;

#define RSP(pc, off)                                                                               \
    { pc, AGENT_CFA_RSP, off, AGENT_RBP_SAME, 0 }
#define RSP_BP(pc, off, bp)                                                                        \
    { pc, AGENT_CFA_RSP, off, AGENT_RBP_AT_CFA, bp }
#define RBP_BP(pc, off, bp)                                                                        \
    { pc, AGENT_CFA_RBP, off, AGENT_RBP_AT_CFA, bp }
#define GAP(pc)                                                                                    \
    { pc, AGENT_CFA_FP, 0, AGENT_RBP_SAME, 0 }
#define END(pc)                                                                                    \
    { pc, AGENT_CFA_END, 0, AGENT_RBP_SAME, 0 }

static void expect_rows_impl(const bytes *s, bool debug_frame, const want *w, size_t n,
                             size_t n_fdes) {
    agent_cfi_table t;
    strata_error err = {0};
    int rc = agent_cfi_parse_section(s->b, s->n, VADDR, debug_frame, 0, &t, &err);
    if (rc != 0)
        fail_msg("parse failed: %s", err.message);
    for (size_t i = 0; i < t.n_rows && i < n; i++) {
        const struct agent_unwind_row *r = &t.rows[i];
        if (r->pc != w[i].pc || r->cfa_type != w[i].cfa_type || r->cfa_offset != w[i].cfa_offset ||
            r->rbp_type != w[i].rbp_type || r->rbp_offset != w[i].rbp_offset)
            fail_msg("row %zu: got pc 0x%" PRIx64 " cfa %u%+d rbp %u%+d, want pc 0x%" PRIx64
                     " cfa %d%+d rbp %d%+d",
                     i, (uint64_t)r->pc, r->cfa_type, r->cfa_offset, r->rbp_type, r->rbp_offset,
                     w[i].pc, w[i].cfa_type, w[i].cfa_offset, w[i].rbp_type, w[i].rbp_offset);
    }
    assert_int_equal(t.n_rows, n);
    assert_int_equal(t.n_fdes, n_fdes);
    agent_cfi_table_free(&t);
}

#define EXPECT_ROWS(s, debug, n_fdes, ...)                                                         \
    do {                                                                                           \
        const want w_[] = {__VA_ARGS__};                                                           \
        expect_rows_impl(s, debug, w_, sizeof w_ / sizeof w_[0], n_fdes);                          \
    } while (0)

static void expect_invalid(const bytes *s, bool debug_frame, const char *message_part) {
    agent_cfi_table t;
    strata_error err = {0};
    assert_int_equal(agent_cfi_parse_section(s->b, s->n, VADDR, debug_frame, 0, &t, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    if (strstr(err.message, message_part) == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", err.message, message_part);
    assert_null(t.rows);
    assert_int_equal(t.n_rows, 0);
}

/* ---- hand-built sections ---- */

static void test_prologue_epilogue(void **state) {
    (void)state;
    bytes s = {0};
    size_t cie = eh_cie(&s);
    /* push %rbp; mov %rsp,%rbp; ...; leave-like: CFA back to rsp+8 and rbp restored */
    eh_fde(&s, cie, 0x2000, 0x40,
           INSNS(0x41, 0x0e, 0x10, 0x86, 0x02, /* +1: rsp+16, rbp at c-16 */
                 0x43, 0x0d, 0x06,             /* +3: CFA = rbp+16 */
                 0x02, 0x30, 0x0c, 0x07, 0x08, /* +0x30: rsp+8 */
                 0xc6));                       /* restore rbp */
    put_le(&s, 0, 4);                          /* terminator */
    put_le(&s, 0xdeadbeef, 4);                 /* ignored: after the terminator */
    EXPECT_ROWS(&s, false, 1, RSP(0x2000, 8), RSP_BP(0x2001, 16, -16), RBP_BP(0x2004, 16, -16),
                RSP(0x2034, 8), GAP(0x2040));
}

static void test_remember_restore_state(void **state) {
    (void)state;
    bytes s = {0};
    size_t cie = eh_cie(&s);
    eh_fde(&s, cie, 0x3000, 12,
           INSNS(0x41, 0x0e, 0x10,   /* +1: rsp+16 */
                 0x0a,               /* remember */
                 0x44, 0x0e, 0x08,   /* +4: rsp+8 (ret) */
                 0x41, 0x0b,         /* +1: restore: rsp+16 */
                 0x44, 0x0e, 0x08)); /* +4: rsp+8 */
    EXPECT_ROWS(&s, false, 1, RSP(0x3000, 8), RSP(0x3001, 16), RSP(0x3005, 8), RSP(0x3006, 16),
                RSP(0x300a, 8), GAP(0x300c));
}

static void test_advance_variants(void **state) {
    (void)state;
    bytes s = {0};
    size_t cie = eh_cie(&s);
    eh_fde(&s, cie, 0x10000, 0x20000,
           INSNS(0x02, 0x10, 0x0e, 0x10,                     /* advance_loc1 0x10 */
                 0x03, 0x00, 0x01, 0x0e, 0x18,               /* advance_loc2 0x100 */
                 0x04, 0x00, 0x00, 0x01, 0x00, 0x0e, 0x20,   /* advance_loc4 0x10000 */
                 0x40,                                       /* advance_loc 0: no row */
                 0x0e, 0x28,                                 /* rsp+40 at the same pc */
                 0x04, 0x00, 0x00, 0x10, 0x00, 0x0e, 0x30)); /* past the end: dropped */
    EXPECT_ROWS(&s, false, 1, RSP(0x10000, 8), RSP(0x10010, 16), RSP(0x10110, 24), RSP(0x20110, 40),
                GAP(0x30000));

    /* code alignment factor 4: advance_loc 2 moves 8 bytes; DW_CFA_set_loc (pcrel sdata4) */
    bytes t = {0};
    size_t cie4 = eh_cie_with(&t, "zR", INSNS(0x1b), 4, INSNS(0x0c, 0x07, 0x08, 0x90, 0x01));
    size_t fde =
        eh_fde(&t, cie4, 0x4000, 0x40, INSNS(0x42, 0x0e, 0x10, 0x01, 0, 0, 0, 0, 0x0e, 0x18));
    /* patch set_loc's operand: 0x4020 relative to its own address */
    size_t field = fde + 4 + 4 + 4 + 4 + 1 + 3 + 1;
    uint32_t rel = (uint32_t)(0x4020 - (VADDR + field));
    memcpy(&t.b[field], &rel, 4);
    EXPECT_ROWS(&t, false, 1, RSP(0x4000, 8), RSP(0x4008, 16), RSP(0x4020, 24), GAP(0x4040));
}

static const uint8_t plt_cfa[] = {0x0f, 11,   0x77, 0x08, 0x80, 0x00, 0x3f,
                                  0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22};

static void test_cfa_expressions(void **state) {
    (void)state;
    bytes s = {0};
    size_t cie = eh_cie(&s);
    /* the PLT: push; jmp at 0, then the expression from 0x10 */
    uint8_t plt_insns[64] = {0x0e, 0x10, 0x46, 0x0e, 0x18, 0x4a};
    memcpy(plt_insns + 6, plt_cfa, sizeof plt_cfa);
    eh_fde(&s, cie, 0x5000, 0x40, plt_insns, 6 + sizeof plt_cfa);
    /* a signal frame's: DW_OP_breg7 160; DW_OP_deref */
    eh_fde(&s, cie, 0x6000, 0x10, INSNS(0x41, 0x0f, 0x04, 0x77, 0xa0, 0x01, 0x06));
    /* the PLT expression with lit10 instead of lit11: not the PLT rule */
    uint8_t lit10[1 + sizeof plt_cfa] = {0x41};
    memcpy(lit10 + 1, plt_cfa, sizeof plt_cfa);
    lit10[1 + 8] = 0x3a;
    eh_fde(&s, cie, 0x7000, 0x10, lit10, sizeof lit10);
    EXPECT_ROWS(&s, false, 3, RSP(0x5000, 16), RSP(0x5006, 24),
                {0x5010, AGENT_CFA_PLT, 0, AGENT_RBP_SAME, 0}, GAP(0x5040), RSP(0x6000, 8),
                GAP(0x6001), RSP(0x7000, 8), GAP(0x7001));
}

static void test_return_address_rules(void **state) {
    (void)state;
    bytes s = {0};
    size_t cie = eh_cie(&s);
    eh_fde(&s, cie, 0x1000, 0x10, INSNS(0x07, 0x10));             /* _start: ra undefined */
    eh_fde(&s, cie, 0x2000, 0x10, INSNS(0x41, 0x90, 0x02));       /* ra at c-16: FP */
    eh_fde(&s, cie, 0x3000, 0x10, INSNS(0x41, 0x0c, 0x0a, 0x00)); /* CFA = r10: FP */
    eh_fde(&s, cie, 0x4000, 0x10,
           INSNS(0x41, 0x0c, 0x07, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01)); /* rsp+2^42 */
    eh_fde(&s, cie, 0x5000, 0x10, INSNS(0x41, 0x10, 0x10, 0x01, 0x50));        /* ra expression */
    EXPECT_ROWS(&s, false, 5, END(0x1000), GAP(0x1010), RSP(0x2000, 8), GAP(0x2001), RSP(0x3000, 8),
                GAP(0x3001), RSP(0x4000, 8), GAP(0x4001), RSP(0x5000, 8), GAP(0x5001));
}

static void test_rbp_rules(void **state) {
    (void)state;
    bytes s = {0};
    size_t cie = eh_cie(&s);
    eh_fde(&s, cie, 0x1000, 0x10,
           INSNS(0x0e, 0x10, 0x86, 0x02,               /* rsp+16, rbp c-16 */
                 0x41, 0x09, 0x06, 0x03,               /* +1: rbp in rbx: lost */
                 0x41, 0x08, 0x06,                     /* +1: same value */
                 0x41, 0x05, 0x06, 0x88, 0x27,         /* +1: offset_extended 5000*-8: lost */
                 0x41, 0x11, 0x06, 0x7e,               /* +1: offset_extended_sf -2*-8 = c+16 */
                 0x41, 0x2f, 0x06, 0x03,               /* +1: negative_offset_extended: c+24 */
                 0x41, 0x06, 0x06,                     /* +1: restore_extended: unset */
                 0x41, 0x10, 0x06, 0x02, 0x76, 0x00,   /* +1: expression: lost */
                 0x41, 0x07, 0x06,                     /* +1: undefined: lost */
                 0x41, 0x14, 0x06, 0x01,               /* +1: val_offset: lost */
                 0x41, 0x86, 0x03, 0x2e, 0x10, 0x00)); /* +1: c-24 (args_size, nop ignored) */
    EXPECT_ROWS(
        &s, false, 1, RSP_BP(0x1000, 16, -16), {0x1001, AGENT_CFA_RSP, 16, AGENT_RBP_LOST, 0},
        RSP(0x1002, 16), {0x1003, AGENT_CFA_RSP, 16, AGENT_RBP_LOST, 0}, RSP_BP(0x1004, 16, 16),
        RSP_BP(0x1005, 16, 24), RSP(0x1006, 16), {0x1007, AGENT_CFA_RSP, 16, AGENT_RBP_LOST, 0},
        RSP_BP(0x100a, 16, -24), GAP(0x1010));
}

static void test_table_rules(void **state) {
    (void)state;
    bytes s = {0};
    size_t cie = eh_cie(&s);
    /* out of order in the section; adjacent FDEs with equal rules merge */
    eh_fde(&s, cie, 0x2100, 0x100, INSNS(0x00));
    eh_fde(&s, cie, 0x2000, 0x100, INSNS(0x00));
    eh_fde(&s, cie, 0x2300, 0x10, INSNS(0x00));
    eh_fde(&s, cie, 0x2308, 0x18, INSNS(0x0e, 0x10)); /* overrides the previous from 0x2308 */
    eh_fde(&s, cie, 0x2400, 0, INSNS(0x0e, 0x10));    /* empty: skipped */
    eh_fde(&s, cie, 0x2308, 0x8, INSNS(0x0e, 0x18));  /* same start: the later one in the section */
    EXPECT_ROWS(&s, false, 5, RSP(0x2000, 8), GAP(0x2200), RSP(0x2300, 8), RSP(0x2308, 24),
                GAP(0x2310));
}

static void test_personality_lsda_signal(void **state) {
    (void)state;
    bytes s = {0};
    /* "zPLR": personality indirect|pcrel|sdata4, LSDA pcrel|sdata4, FDEs pcrel|sdata4 */
    size_t cie = eh_cie_with(&s, "zPLR", INSNS(0x9b, 0x11, 0x22, 0x33, 0x44, 0x1b, 0x1b), 1,
                             INSNS(0x0c, 0x07, 0x08, 0x90, 0x01));
    size_t off = s.n;
    put_le(&s, 0, 4);
    put_le(&s, s.n - cie, 4);
    put_le(&s, (uint64_t)(0x8000 - (VADDR + s.n)), 4);
    put_le(&s, 0x20, 4);
    put_uleb(&s, 4);
    put_le(&s, 0x12345678, 4); /* the LSDA pointer */
    put_mem(&s, INSNS(0x44, 0x0e, 0x10));
    close_entry32(&s, off);
    /* "zRS" with udata8 absolute pointers */
    size_t cie2 = eh_cie_with(&s, "zRS", INSNS(0x04), 1, INSNS(0x0c, 0x07, 0x08, 0x90, 0x01));
    off = s.n;
    put_le(&s, 0, 4);
    put_le(&s, s.n - cie2, 4);
    put_le(&s, 0x9000, 8);
    put_le(&s, 0x10, 8);
    put_uleb(&s, 0);
    close_entry32(&s, off);
    /* datarel pointers: skipped (a gap, not an error) */
    size_t cie3 = eh_cie_with(&s, "zR", INSNS(0x3b), 1, INSNS(0x0c, 0x07, 0x08, 0x90, 0x01));
    eh_fde(&s, cie3, 0xa000, 0x10, INSNS(0x00));
    /* an unknown augmentation without 'z': skipped */
    size_t cie4 = eh_cie_with(&s, "eh", NULL, 0, 1, INSNS(0x00));
    eh_fde(&s, cie4, 0xb000, 0x10, INSNS(0x00));
    EXPECT_ROWS(&s, false, 2, RSP(0x8000, 8), RSP(0x8004, 16), GAP(0x8020), RSP(0x9000, 8),
                GAP(0x9010));
}

static void test_64bit_lengths(void **state) {
    (void)state;
    bytes s = {0};
    put_le(&s, 0xffffffff, 4);
    size_t len_at = s.n;
    put_le(&s, 0, 8);
    size_t cie = 0;
    put_le(&s, 0, 8); /* CIE id, 8 bytes in the 64-bit format */
    put8(&s, 1);
    put_mem(&s, "zR", 3);
    put_uleb(&s, 1);
    put_sleb(&s, -8);
    put8(&s, 16);
    put_uleb(&s, 1);
    put8(&s, 0x1b);
    put_mem(&s, INSNS(0x0c, 0x07, 0x08, 0x90, 0x01));
    uint64_t len = s.n - len_at - 8;
    memcpy(&s.b[len_at], &len, 8);
    put_le(&s, 0xffffffff, 4);
    len_at = s.n;
    put_le(&s, 0, 8);
    put_le(&s, s.n - cie, 8);
    put_le(&s, (uint64_t)(0x6000 - (VADDR + s.n)), 4);
    put_le(&s, 0x10, 4);
    put_uleb(&s, 0);
    put_mem(&s, INSNS(0x42, 0x0e, 0x10));
    len = s.n - len_at - 8;
    memcpy(&s.b[len_at], &len, 8);
    EXPECT_ROWS(&s, false, 1, RSP(0x6000, 8), RSP(0x6002, 16), GAP(0x6010));
}

/* .debug_frame: a CIE of version ver (32- or 64-bit) and an FDE pointing back at it. */
static void debug_frame(bytes *s, int ver, bool dwarf64) {
    size_t idsz = dwarf64 ? 8 : 4;
    size_t cie = s->n;
    if (dwarf64)
        put_le(s, 0xffffffff, 4);
    size_t len_at = s->n;
    put_le(s, 0, idsz);
    put_le(s, dwarf64 ? UINT64_MAX : 0xffffffff, idsz);
    put8(s, (uint64_t)ver);
    put8(s, 0); /* "" */
    if (ver == 4) {
        put8(s, 8);
        put8(s, 0);
    }
    put_uleb(s, 1);
    put_sleb(s, -8);
    if (ver == 1)
        put8(s, 16);
    else
        put_uleb(s, 16);
    put_mem(s, INSNS(0x0c, 0x07, 0x08, 0x90, 0x01));
    uint64_t len = s->n - len_at - idsz;
    memcpy(&s->b[len_at], &len, idsz);
    if (dwarf64)
        put_le(s, 0xffffffff, 4);
    len_at = s->n;
    put_le(s, 0, idsz);
    put_le(s, cie, idsz);
    put_le(s, 0x401000, 8);
    put_le(s, 0x30, 8);
    put_mem(s, INSNS(0x41, 0x0e, 0x10, 0x86, 0x02, 0x43, 0x0d, 0x06));
    len = s->n - len_at - idsz;
    memcpy(&s->b[len_at], &len, idsz);
}

static void test_debug_frame(void **state) {
    (void)state;
    for (int ver = 1; ver <= 4; ver += 3) {
        for (int d64 = 0; d64 <= 1; d64++) {
            bytes s = {0};
            debug_frame(&s, ver, d64 != 0);
            EXPECT_ROWS(&s, true, 1, RSP(0x401000, 8), RSP_BP(0x401001, 16, -16),
                        RBP_BP(0x401004, 16, -16), GAP(0x401030));
        }
    }
    /* the FDE's CIE pointer is an offset from the section start: a CIE after its FDE works */
    bytes s = {0};
    put_le(&s, 0, 4);
    put_le(&s, 0x18, 4); /* the CIE is at 0x18 */
    put_le(&s, 0x500000, 8);
    put_le(&s, 0x8, 8);
    close_entry32(&s, 0);
    assert_int_equal(s.n, 0x18);
    put_le(&s, 0, 4);
    put_le(&s, 0xffffffff, 4);
    put8(&s, 3);
    put8(&s, 0);
    put_uleb(&s, 1);
    put_sleb(&s, -8);
    put_uleb(&s, 16);
    put_mem(&s, INSNS(0x0c, 0x07, 0x08, 0x90, 0x01));
    close_entry32(&s, 0x18);
    EXPECT_ROWS(&s, true, 1, RSP(0x500000, 8), GAP(0x500008));
    /* the .eh_frame reading of the same bytes: the FDE's "CIE pointer" points past itself */
    expect_invalid(&s, false, "CIE pointer");
}

static void test_max_rows(void **state) {
    (void)state;
    bytes s = {0};
    size_t cie = eh_cie(&s);
    eh_fde(&s, cie, 0x2000, 0x10, INSNS(0x41, 0x0e, 0x10, 0x41, 0x0e, 0x18));
    agent_cfi_table t;
    strata_error err = {0};
    assert_int_equal(agent_cfi_parse_section(s.b, s.n, VADDR, false, 4, &t, &err), 0);
    assert_int_equal(t.n_rows, 4);
    agent_cfi_table_free(&t);
    assert_int_equal(agent_cfi_parse_section(s.b, s.n, VADDR, false, 3, &t, &err), -1);
    assert_int_equal(err.code, STRATA_RESOURCE_EXHAUSTED);
    assert_null(t.rows);
    /* no CFI at all: an empty table */
    assert_int_equal(agent_cfi_parse_section(NULL, 0, 0, false, 0, &t, &err), 0);
    assert_int_equal(t.n_rows, 0);
    agent_cfi_table_free(&t);
    agent_cfi_table_free(NULL);
}

/* ---- streaming: chunks, overrides across chunks, .eh_frame_hdr ---- */

typedef struct collected_rows {
    agent_cfi_table *t;
    size_t cap, largest;
} collected_rows;

static int collect_chunk(void *ctx, const struct agent_unwind_row *rows, size_t n,
                         strata_error *err) {
    collected_rows *c = ctx;
    if (STRATA_ARRAY_RESERVE_OR_OOM(c->t->rows, c->cap, c->t->n_rows + n, err) != 0)
        return -1;
    memcpy(c->t->rows + c->t->n_rows, rows, n * sizeof *rows);
    c->t->n_rows += n;
    if (n > c->largest)
        c->largest = n;
    return 0;
}

typedef struct stream_log {
    size_t n, calls, largest_call, fail_at_call;
    struct agent_unwind_row rows[16384]; /* last: a reset clears what comes before */
} stream_log;

static int log_rows(void *ctx, const struct agent_unwind_row *rows, size_t n, strata_error *err) {
    stream_log *l = ctx;
    l->calls++;
    if (l->fail_at_call != 0 && l->calls == l->fail_at_call)
        return strata_error_set(err, STRATA_UNAVAILABLE, "sink refused chunk %zu", l->calls);
    assert_true(n > 0);
    assert_true(l->n + n <= sizeof l->rows / sizeof l->rows[0]);
    if (l->n > 0)
        assert_true(rows[0].pc > l->rows[l->n - 1].pc); /* strictly increasing across calls */
    memcpy(l->rows + l->n, rows, n * sizeof *rows);
    l->n += n;
    if (n > l->largest_call)
        l->largest_call = n;
    return 0;
}

/* A: [A0, A0 + k) with k rows alternating rsp+16 / rsp+24; B: [A0 + m, A0 + m + 10), rsp+8,
 * overriding A from its start on. Returns the offsets of A's and B's FDEs. */
#define A0 0x10000u
static void long_fde_and_override(bytes *s, size_t k, size_t m, size_t *a, size_t *b) {
    size_t cie = eh_cie(s);
    bytes prog = {0};
    for (size_t i = 0; i < k; i++) {
        put8(&prog, 0x0e); /* DW_CFA_def_cfa_offset */
        put8(&prog, 16 + 8 * (i % 2));
        put8(&prog, 0x41); /* DW_CFA_advance_loc 1 */
    }
    *a = eh_fde(s, cie, A0, k, prog.b, prog.n);
    *b = eh_fde(s, cie, A0 + m, 10, INSNS(0x00));
}

static void expect_override_rows(const stream_log *l, size_t m) {
    assert_int_equal(l->n, m + 2);
    for (size_t i = 0; i < m; i++) {
        assert_int_equal(l->rows[i].pc, A0 + i);
        assert_int_equal(l->rows[i].cfa_type, AGENT_CFA_RSP);
        assert_int_equal(l->rows[i].cfa_offset, 16 + 8 * (i % 2));
    }
    assert_int_equal(l->rows[m].pc, A0 + m);
    assert_int_equal(l->rows[m].cfa_offset, 8);
    assert_int_equal(l->rows[m + 1].pc, A0 + m + 10);
    assert_int_equal(l->rows[m + 1].cfa_type, AGENT_CFA_FP);
}

/* An .eh_frame_hdr at HDR_VADDR for the FDEs at offsets fdes[] starting at starts[]. */
#define HDR_VADDR 0x800u
static void eh_frame_hdr(bytes *h, const uint64_t *starts, const size_t *fdes, size_t n) {
    put8(h, 1);    /* version */
    put8(h, 0x1b); /* eh_frame_ptr: pcrel sdata4 */
    put8(h, 0x03); /* fde_count: udata4 */
    put8(h, 0x3b); /* table: datarel sdata4 */
    put_le(h, (uint64_t)(VADDR - (HDR_VADDR + 4)), 4);
    put_le(h, n, 4);
    for (size_t i = 0; i < n; i++) {
        put_le(h, starts[i] - HDR_VADDR, 4);
        put_le(h, VADDR + fdes[i] - HDR_VADDR, 4);
    }
}

static int stream_with_hdr(const bytes *s, const bytes *h, stream_log *l, strata_error *err) {
    agent_cfi_source src = {.frame = s->b,
                            .frame_size = s->n,
                            .frame_vaddr = VADDR,
                            .hdr = h != NULL ? h->b : NULL,
                            .hdr_size = h != NULL ? h->n : 0,
                            .hdr_vaddr = HDR_VADDR};
    agent_cfi_counts counts;
    memset(l, 0, offsetof(stream_log, rows));
    int rc = agent_cfi_stream(&src, 0, log_rows, l, &counts, err);
    if (rc == 0)
        assert_int_equal(counts.rows, l->n);
    return rc;
}

static void test_stream_chunks_and_overrides(void **state) {
    (void)state;
    static stream_log l;
    strata_error err = {0};
    /* the override lands past several chunks: every chunk holds at most AGENT_CFI_CHUNK_ROWS */
    static bytes s;
    memset(&s, 0, sizeof s);
    size_t a, b;
    long_fde_and_override(&s, 12000, 9000, &a, &b);
    if (stream_with_hdr(&s, NULL, &l, &err) != 0)
        fail_msg("%s", err.message);
    expect_override_rows(&l, 9000);
    assert_true(l.calls >= 3);
    assert_true(l.largest_call <= AGENT_CFI_CHUNK_ROWS);
    /* the same through an .eh_frame_hdr */
    bytes h = {0};
    eh_frame_hdr(&h, (const uint64_t[]){A0, A0 + 9000}, (const size_t[]){a, b}, 2);
    if (stream_with_hdr(&s, &h, &l, &err) != 0)
        fail_msg("%s", err.message);
    expect_override_rows(&l, 9000);
    /* the override lands early: A's 11,900 rows past it wait (more than a chunk), then go */
    memset(&s, 0, sizeof s);
    long_fde_and_override(&s, 12000, 100, &a, &b);
    if (stream_with_hdr(&s, NULL, &l, &err) != 0)
        fail_msg("%s", err.message);
    expect_override_rows(&l, 100);
    /* a sink that fails stops the parse with its error */
    memset(&l, 0, offsetof(stream_log, rows));
    memset(&s, 0, sizeof s);
    long_fde_and_override(&s, 12000, 9000, &a, &b);
    l.fail_at_call = 2;
    agent_cfi_source src = {.frame = s.b, .frame_size = s.n, .frame_vaddr = VADDR};
    agent_cfi_counts counts;
    assert_int_equal(agent_cfi_stream(&src, 0, log_rows, &l, &counts, &err), -1);
    assert_int_equal(err.code, STRATA_UNAVAILABLE);
    assert_int_equal(l.calls, 2);
}

static void test_eh_frame_hdr(void **state) {
    (void)state;
    static stream_log walk, by_hdr;
    strata_error err = {0};
    bytes s = {0};
    size_t cie = eh_cie(&s);
    /* FDEs out of address order in the section, as the table sorts them */
    size_t f2 = eh_fde(&s, cie, 0x3000, 0x10, INSNS(0x41, 0x0e, 0x10));
    size_t f1 = eh_fde(&s, cie, 0x2000, 0x20, INSNS(0x44, 0x0e, 0x10, 0x44, 0x0e, 0x08));
    size_t cie2 = eh_cie_with(&s, "zR", INSNS(0x1b), 1, INSNS(0x0c, 0x07, 0x08, 0x90, 0x01));
    size_t f3 = eh_fde(&s, cie2, 0x4000, 0x8, INSNS(0x0e, 0x20));
    assert_int_equal(stream_with_hdr(&s, NULL, &walk, &err), 0);
    assert_int_equal(walk.n, 9); /* 4 rows of f1, 3 of f2, 2 of f3 */
    bytes h = {0};
    eh_frame_hdr(&h, (const uint64_t[]){0x2000, 0x3000, 0x4000}, (const size_t[]){f1, f2, f3}, 3);
    assert_int_equal(stream_with_hdr(&s, &h, &by_hdr, &err), 0);
    assert_int_equal(by_hdr.n, walk.n);
    assert_memory_equal(by_hdr.rows, walk.rows, walk.n * sizeof walk.rows[0]);
    /* an FDE the table does not list is not read (the runtime would not find it either) */
    h.n = 0;
    eh_frame_hdr(&h, (const uint64_t[]){0x2000, 0x4000}, (const size_t[]){f1, f3}, 2);
    assert_int_equal(stream_with_hdr(&s, &h, &by_hdr, &err), 0);
    assert_int_equal(by_hdr.n, walk.n - 3);
    /* a table out of order, or of another encoding, is not used: the section is walked */
    h.n = 0;
    eh_frame_hdr(&h, (const uint64_t[]){0x3000, 0x2000, 0x4000}, (const size_t[]){f2, f1, f3}, 3);
    assert_int_equal(stream_with_hdr(&s, &h, &by_hdr, &err), 0);
    assert_int_equal(by_hdr.n, walk.n);
    h.b[3] = 0x1b;
    assert_int_equal(stream_with_hdr(&s, &h, &by_hdr, &err), 0);
    assert_int_equal(by_hdr.n, walk.n);
    /* a table that contradicts the section is malformed */
    struct {
        uint64_t starts[3];
        size_t fdes[3];
        const char *message;
    } bad[] = {
        {{0x2000, 0x3000, 0x4000}, {f1, cie, f3}, "does not point at an FDE"},
        {{0x2000, 0x3000, 0x4000}, {f1, f3, f2}, "starts elsewhere"},
        {{0x2000, 0x3000, 0x4000}, {f1, f2, s.n + 64}, "outside .eh_frame"},
        {{0x2000, 0x3000, 0x4000}, {f1, f2, f3 + 1}, "entry"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        h.n = 0;
        eh_frame_hdr(&h, bad[i].starts, bad[i].fdes, 3);
        assert_int_equal(stream_with_hdr(&s, &h, &by_hdr, &err), -1);
        assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
        if (strstr(err.message, bad[i].message) == NULL)
            fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err.message, bad[i].message);
    }
    /* a truncated or miscounted table is not used */
    h.n = 0;
    eh_frame_hdr(&h, (const uint64_t[]){0x2000, 0x3000, 0x4000}, (const size_t[]){f1, f2, f3}, 3);
    h.b[8] = 4; /* says four entries, has three */
    assert_int_equal(stream_with_hdr(&s, &h, &by_hdr, &err), 0);
    assert_int_equal(by_hdr.n, walk.n);
}

static void test_malformed(void **state) {
    (void)state;
    bytes s = {0};
    /* truncated section and truncated length */
    put_le(&s, 8, 3);
    expect_invalid(&s, false, "offset 0x0: truncated entry length");
    /* length past the end */
    s.n = 0;
    eh_cie(&s);
    s.b[0] += 1;
    expect_invalid(&s, false, "offset 0x0: entry length runs past the end");
    /* reserved length */
    s.n = 0;
    put_le(&s, 0xfffffff0, 4);
    expect_invalid(&s, false, "reserved entry length");
    /* truncated CIE: no room for the augmentation string's NUL */
    s.n = 0;
    put_le(&s, 6, 4);
    put_le(&s, 0, 4);
    put8(&s, 1);
    put8(&s, 'z');
    expect_invalid(&s, false, "augmentation string");
    /* truncated CIE: the fields stop after the string */
    s.n = 0;
    put_le(&s, 7, 4);
    put_le(&s, 0, 4);
    put8(&s, 1);
    put_mem(&s, "", 1);
    put8(&s, 0x81); /* code alignment runs out */
    expect_invalid(&s, false, "truncated CIE");
    /* CIE pointer out of range, and into the middle of an entry */
    s.n = 0;
    size_t cie = eh_cie(&s);
    size_t fde = eh_fde(&s, cie, 0x2000, 0x10, INSNS(0x00));
    s.b[fde + 4] = 0xff;
    s.b[fde + 5] = 0xff;
    expect_invalid(&s, false, "points before the section");
    s.b[fde + 4] = (uint8_t)(fde + 4 - 2);
    s.b[fde + 5] = 0;
    expect_invalid(&s, false, "does not point at a CIE");
    /* an overlong ULEB128 in the program */
    s.n = 0;
    cie = eh_cie(&s);
    eh_fde(&s, cie, 0x2000, 0x10,
           INSNS(0x0e, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01));
    expect_invalid(&s, false, "overlong operand");
    /* an overlong SLEB128 */
    s.n = 0;
    cie = eh_cie(&s);
    eh_fde(&s, cie, 0x2000, 0x10,
           INSNS(0x13, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02));
    expect_invalid(&s, false, "overlong operand");
    /* a truncated operand at the end of the FDE */
    s.n = 0;
    cie = eh_cie(&s);
    eh_fde(&s, cie, 0x2000, 0x10, INSNS(0x03, 0x01));
    expect_invalid(&s, false, "truncated DW_CFA_advance_loc");
    /* remember_state deeper than the bound */
    s.n = 0;
    cie = eh_cie(&s);
    uint8_t deep[AGENT_CFI_MAX_STATE_DEPTH + 1];
    memset(deep, 0x0a, sizeof deep);
    size_t deep_fde = eh_fde(&s, cie, 0x2000, 0x10, deep, sizeof deep);
    char where[64];
    snprintf(where, sizeof where, "offset 0x%zx: DW_CFA_remember_state nested too deep",
             deep_fde + 17 + AGENT_CFI_MAX_STATE_DEPTH);
    expect_invalid(&s, false, where);
    s.n = 0;
    cie = eh_cie(&s);
    eh_fde(&s, cie, 0x2000, 0x10, deep, sizeof deep - 1); /* exactly the bound: fine */
    EXPECT_ROWS(&s, false, 1, RSP(0x2000, 8), GAP(0x2010));
    /* restore_state on an empty stack */
    s.n = 0;
    cie = eh_cie(&s);
    eh_fde(&s, cie, 0x2000, 0x10, INSNS(0x0b));
    expect_invalid(&s, false, "restore_state without remember_state");
    /* unknown opcodes, in an FDE and in a CIE */
    s.n = 0;
    cie = eh_cie(&s);
    eh_fde(&s, cie, 0x2000, 0x10, INSNS(0x41, 0x20));
    expect_invalid(&s, false, "unknown DW_CFA opcode 0x20");
    s.n = 0;
    eh_cie_with(&s, "zR", INSNS(0x1b), 1, INSNS(0x2d));
    expect_invalid(&s, false, "offset 0x11: unknown DW_CFA opcode 0x2d");
    /* set_loc backwards */
    s.n = 0;
    cie = eh_cie_with(&s, "zR", INSNS(0x04), 1, INSNS(0x0c, 0x07, 0x08, 0x90, 0x01));
    size_t off = s.n;
    put_le(&s, 0, 4);
    put_le(&s, s.n - cie, 4);
    put_le(&s, 0x2000, 8);
    put_le(&s, 0x10, 8);
    put_uleb(&s, 0);
    put_mem(&s, INSNS(0x41, 0x01));
    put_le(&s, 0x1fff, 8);
    close_entry32(&s, off);
    expect_invalid(&s, false, "backwards");
    /* augmentation data past the entry */
    s.n = 0;
    eh_cie_with(&s, "zR", INSNS(0x1b), 1, INSNS(0x00));
    s.b[4 + 4 + 1 + 3 + 1 + 1 + 1] = 0x7f;
    expect_invalid(&s, false, "augmentation data runs past the entry");
}

/* Every prefix of a valid section and every byte of it set to a few values parse without a
 * crash (valgrind watches the reads) to either a table or INVALID_ARGUMENT. */
static void test_mutations(void **state) {
    (void)state;
    bytes s = {0};
    size_t cie = eh_cie_with(&s, "zPLR", INSNS(0x9b, 0x11, 0x22, 0x33, 0x44, 0x1b, 0x1b), 1,
                             INSNS(0x0c, 0x07, 0x08, 0x90, 0x01));
    size_t off = s.n;
    put_le(&s, 0, 4);
    put_le(&s, s.n - cie, 4);
    put_le(&s, (uint64_t)(0x8000 - (VADDR + s.n)), 4);
    put_le(&s, 0x20, 4);
    put_uleb(&s, 4);
    put_le(&s, 0, 4);
    put_mem(&s, INSNS(0x41, 0x0e, 0x10, 0x86, 0x02, 0x0a, 0x43, 0x0d, 0x06, 0x0b));
    put_mem(&s, plt_cfa, sizeof plt_cfa);
    close_entry32(&s, off);
    eh_fde(&s, cie, 0x9000, 0x10, INSNS(0x41, 0x07, 0x10, 0x2e, 0x08));
    const uint8_t values[] = {0x00, 0x01, 0x0a, 0x0b, 0x7f, 0x80, 0xff};
    size_t ok = 0, invalid = 0;
    for (size_t n = 0; n <= s.n; n++) {
        agent_cfi_table t;
        strata_error err = {0};
        uint8_t *copy = malloc(n + 1); /* exactly n bytes for valgrind (+1: malloc(0)) */
        assert_non_null(copy);
        memcpy(copy, s.b, n);
        if (agent_cfi_parse_section(copy, n, VADDR, false, 0, &t, &err) == 0)
            ok++;
        else
            invalid += err.code == STRATA_INVALID_ARGUMENT;
        agent_cfi_table_free(&t);
        free(copy);
    }
    assert_int_equal(ok + invalid, s.n + 1);
    for (size_t i = 0; i < s.n; i++) {
        for (size_t v = 0; v < sizeof values; v++) {
            for (int debug = 0; debug <= 1; debug++) {
                bytes m = s;
                m.b[i] = values[v];
                agent_cfi_table t;
                strata_error err = {0};
                uint8_t *copy = malloc(m.n);
                assert_non_null(copy);
                memcpy(copy, m.b, m.n);
                if (agent_cfi_parse_section(copy, m.n, VADDR, debug != 0, 0, &t, &err) == 0) {
                    for (size_t r = 1; r < t.n_rows; r++)
                        assert_true(t.rows[r - 1].pc < t.rows[r].pc);
                } else {
                    assert_true(err.code == STRATA_INVALID_ARGUMENT);
                }
                agent_cfi_table_free(&t);
                free(copy);
            }
        }
    }
}

/* ---- ELF files written with libelf ---- */

static void write_elf(const char *path, uint16_t machine, const char *name, const bytes *content) {
    assert_int_not_equal(elf_version(EV_CURRENT), EV_NONE);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    Elf *e = elf_begin(fd, ELF_C_WRITE, NULL);
    assert_non_null(e);
    Elf64_Ehdr *eh = elf64_newehdr(e);
    assert_non_null(eh);
    eh->e_ident[EI_DATA] = ELFDATA2LSB;
    eh->e_machine = machine;
    eh->e_type = ET_DYN;
    eh->e_version = EV_CURRENT;
    static char strtab[64];
    size_t name_off = 1, shstr_off = 1 + strlen(name) + 1;
    memset(strtab, 0, sizeof strtab);
    memcpy(strtab + name_off, name, strlen(name));
    memcpy(strtab + shstr_off, ".shstrtab", 9);
    Elf_Scn *scn = elf_newscn(e);
    assert_non_null(scn);
    Elf_Data *d = elf_newdata(scn);
    assert_non_null(d);
    d->d_buf = (void *)content->b;
    d->d_size = content->n;
    d->d_type = ELF_T_BYTE;
    d->d_align = 1;
    Elf64_Shdr *sh = elf64_getshdr(scn);
    sh->sh_name = (Elf64_Word)name_off;
    sh->sh_type = SHT_PROGBITS;
    Elf_Scn *str = elf_newscn(e);
    assert_non_null(str);
    d = elf_newdata(str);
    assert_non_null(d);
    d->d_buf = strtab;
    d->d_size = shstr_off + 10;
    d->d_type = ELF_T_BYTE;
    d->d_align = 1;
    sh = elf64_getshdr(str);
    sh->sh_name = (Elf64_Word)shstr_off;
    sh->sh_type = SHT_STRTAB;
    eh->e_shstrndx = (Elf64_Half)elf_ndxscn(str);
    assert_true(elf_update(e, ELF_C_WRITE) > 0);
    elf_end(e);
    close(fd);
}

static void test_read_file(void **state) {
    (void)state;
    char path[] = "/tmp/cfi_test_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    bytes s = {0};
    debug_frame(&s, 4, false);
    agent_cfi_table t;
    strata_error err = {0};
    /* a file with .debug_frame only */
    write_elf(path, EM_X86_64, ".debug_frame", &s);
    if (agent_cfi_read_file(path, 0, &t, &err) != 0)
        fail_msg("%s", err.message);
    assert_int_equal(t.n_rows, 4);
    assert_int_equal(t.rows[2].pc, 0x401004);
    assert_int_equal(t.rows[2].cfa_type, AGENT_CFA_RBP);
    agent_cfi_table_free(&t);
    /* the same bytes named .eh_frame are not valid .eh_frame */
    write_elf(path, EM_X86_64, ".eh_frame", &s);
    assert_int_equal(agent_cfi_read_file(path, 0, &t, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, path));
    /* neither: no rows */
    write_elf(path, EM_X86_64, ".text", &s);
    assert_int_equal(agent_cfi_read_file(path, 0, &t, &err), 0);
    assert_int_equal(t.n_rows, 0);
    /* another machine */
    write_elf(path, EM_AARCH64, ".debug_frame", &s);
    assert_int_equal(agent_cfi_read_file(path, 0, &t, &err), -1);
    assert_int_equal(err.code, STRATA_UNIMPLEMENTED);
    /* not ELF, not there */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("not an ELF file at all, just text\n", f);
    fclose(f);
    assert_int_equal(agent_cfi_read_file(path, 0, &t, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    unlink(path);
    assert_int_equal(agent_cfi_read_file(path, 0, &t, &err), -1);
    assert_int_equal(err.code, STRATA_NOT_FOUND);
}

/* ---- the readelf oracle ---- */

typedef struct ref_row {
    uint64_t loc;
    char cfa[24], rbp[24], ra[24];
} ref_row;

typedef struct ref_entry {
    size_t offset;
    bool is_cie;
    size_t cie;
    uint64_t start, end;
    size_t first_row, n_rows; /* into ref.rows */
} ref_entry;

typedef struct ref {
    ref_entry *entries;
    size_t n_entries, cap_entries;
    ref_row *rows;
    size_t n_rows, cap_rows;
    uint64_t plt_lo[8], plt_hi[8];
    size_t n_plt;
} ref;

static void ref_free(ref *r) {
    free(r->entries);
    free(r->rows);
}

/* The address ranges of the .plt* sections (readelf -SW). */
static void read_plt_sections(const char *path, ref *r) {
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "LC_ALL=C readelf -SW '%s' 2>/dev/null", path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[512];
    while (fgets(line, sizeof line, p) != NULL) {
        char *b = strchr(line, ']');
        char name[64], type[64];
        uint64_t addr, off, size;
        if (b == NULL || sscanf(b + 1, "%63s %63s %" SCNx64 " %" SCNx64 " %" SCNx64, name, type,
                                &addr, &off, &size) != 5)
            continue;
        if (strncmp(name, ".plt", 4) == 0 && r->n_plt < 8) {
            r->plt_lo[r->n_plt] = addr;
            r->plt_hi[r->n_plt++] = addr + size;
        }
    }
    pclose(p);
}

/* Parses readelf -wF's .eh_frame listing. Returns false when readelf is not there. */
static bool read_reference(const char *path, ref *r) {
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "LC_ALL=C readelf -wF '%s' 2>/dev/null", path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[4096];
    bool in_eh = false;
    int col_rbp = -1, col_ra = -1;
    ref_entry *cur = NULL;
    while (fgets(line, sizeof line, p) != NULL) {
        if (strncmp(line, "Contents of the ", 16) == 0) {
            in_eh = strncmp(line + 16, ".eh_frame section", 17) == 0;
            cur = NULL;
            continue;
        }
        if (!in_eh)
            continue;
        uint64_t off, len, id, cie, lo, hi;
        if (sscanf(line,
                   "%" SCNx64 " %" SCNx64 " %" SCNx64 " FDE cie=%" SCNx64 " pc=%" SCNx64
                   "..%" SCNx64,
                   &off, &len, &id, &cie, &lo, &hi) == 6 ||
            (sscanf(line, "%" SCNx64 " %" SCNx64 " %" SCNx64, &off, &len, &id) == 3 &&
             strstr(line, " CIE") != NULL)) {
            assert_int_equal(STRATA_ARRAY_RESERVE(r->entries, r->cap_entries, r->n_entries + 1), 0);
            cur = &r->entries[r->n_entries++];
            bool is_cie = strstr(line, " CIE") != NULL && strstr(line, " FDE ") == NULL;
            *cur = (ref_entry){.offset = off, .is_cie = is_cie, .first_row = r->n_rows};
            if (!is_cie) {
                cur->cie = cie;
                cur->start = lo;
                cur->end = hi;
            }
            continue;
        }
        if (cur == NULL)
            continue;
        char *tok[64];
        size_t n_tok = 0;
        for (char *save = NULL, *t = strtok_r(line, " \t\n", &save); t != NULL && n_tok < 64;
             t = strtok_r(NULL, " \t\n", &save)) {
            if (t[0] == '(' && n_tok > 0) /* "r10 (r10)": a register rule is one column */
                continue;
            tok[n_tok++] = t;
        }
        if (n_tok >= 2 && strcmp(tok[0], "LOC") == 0) {
            col_rbp = col_ra = -1;
            for (size_t i = 1; i < n_tok; i++) {
                if (strcmp(tok[i], "rbp") == 0)
                    col_rbp = (int)i;
                if (strcmp(tok[i], "ra") == 0)
                    col_ra = (int)i;
            }
            continue;
        }
        if (n_tok >= 3 && strlen(tok[0]) == 16 && col_ra > 0 && (size_t)col_ra < n_tok) {
            assert_int_equal(STRATA_ARRAY_RESERVE(r->rows, r->cap_rows, r->n_rows + 1), 0);
            ref_row *row = &r->rows[r->n_rows++];
            memset(row, 0, sizeof *row);
            row->loc = strtoull(tok[0], NULL, 16);
            snprintf(row->cfa, sizeof row->cfa, "%s", tok[1]);
            snprintf(row->ra, sizeof row->ra, "%s", tok[col_ra]);
            snprintf(row->rbp, sizeof row->rbp, "%s", col_rbp > 0 ? tok[col_rbp] : "u");
            cur->n_rows++;
        }
    }
    pclose(p); /* its status is 1 for some good files (libc): judge by what it printed */
    return r->n_entries > 0;
}

/* What unwind.h says readelf's row means, for an FDE starting at fde_start. */
static struct agent_unwind_row expected_row(const ref *r, uint64_t fde_start, const ref_row *row) {
    struct agent_unwind_row w = {.cfa_type = AGENT_CFA_FP, .rbp_type = AGENT_RBP_SAME};
    if (strcmp(row->ra, "u") == 0) {
        w.cfa_type = AGENT_CFA_END;
        return w;
    }
    if (strcmp(row->ra, "c-8") != 0)
        return w;
    if (strcmp(row->cfa, "exp") == 0) {
        for (size_t i = 0; i < r->n_plt; i++)
            if (fde_start >= r->plt_lo[i] && fde_start < r->plt_hi[i])
                w.cfa_type = AGENT_CFA_PLT;
        if (w.cfa_type != AGENT_CFA_PLT)
            return w;
    } else {
        char *sign = strpbrk(row->cfa, "+-");
        if (sign == NULL)
            return w;
        long off = strtol(sign, NULL, 10);
        if (strncmp(row->cfa, "rsp", 3) == 0 && sign == row->cfa + 3)
            w.cfa_type = AGENT_CFA_RSP;
        else if (strncmp(row->cfa, "rbp", 3) == 0 && sign == row->cfa + 3)
            w.cfa_type = AGENT_CFA_RBP;
        else
            return w;
        w.cfa_offset = (int32_t)off;
    }
    if (strcmp(row->rbp, "u") == 0 || strcmp(row->rbp, "s") == 0) {
        w.rbp_type = AGENT_RBP_SAME;
    } else if (row->rbp[0] == 'c' && (row->rbp[1] == '-' || row->rbp[1] == '+')) {
        long off = strtol(row->rbp + 1, NULL, 10);
        if (off >= INT16_MIN && off <= INT16_MAX) {
            w.rbp_type = AGENT_RBP_AT_CFA;
            w.rbp_offset = (int16_t)off;
        } else {
            w.rbp_type = AGENT_RBP_LOST;
        }
    } else {
        w.rbp_type = AGENT_RBP_LOST;
    }
    return w;
}

static const ref_entry *find_cie_entry(const ref *r, size_t offset) {
    for (size_t i = 0; i < r->n_entries; i++)
        if (r->entries[i].is_cie && r->entries[i].offset == offset)
            return &r->entries[i];
    return NULL;
}

static int fde_order(const void *a, const void *b) {
    const ref_entry *x = *(const ref_entry *const *)a, *y = *(const ref_entry *const *)b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The expected row at pc: the last FDE (sorted) starting at or before pc, if pc is inside it. */
static struct agent_unwind_row expected_at(const ref *r, const ref_entry *const *sorted, size_t n,
                                           uint64_t pc) {
    struct agent_unwind_row gap = {.cfa_type = AGENT_CFA_FP};
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (sorted[mid]->start <= pc)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0 || pc >= sorted[lo - 1]->end)
        return gap;
    const ref_entry *f = sorted[lo - 1];
    const ref_entry *rows_of = f;
    uint64_t base = 0;
    if (f->n_rows == 0) { /* readelf prints no table for an FDE of nops: the CIE's state */
        rows_of = find_cie_entry(r, f->cie);
        assert_non_null(rows_of);
        assert_true(rows_of->n_rows > 0);
        base = f->start;
    }
    const ref_row *best = NULL;
    for (size_t i = 0; i < rows_of->n_rows; i++) {
        const ref_row *row = &r->rows[rows_of->first_row + i];
        if (base + row->loc <= pc || rows_of != f)
            best = row;
    }
    assert_non_null(best);
    return expected_row(r, f->start, best);
}

static struct agent_unwind_row actual_at(const agent_cfi_table *t, uint64_t pc) {
    struct agent_unwind_row gap = {.cfa_type = AGENT_CFA_FP};
    size_t lo = 0, hi = t->n_rows;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->rows[mid].pc <= pc)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == 0 ? gap : t->rows[lo - 1];
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static size_t mismatches;

static void check_point(const ref *r, const ref_entry *const *sorted, size_t n,
                        const agent_cfi_table *t, uint64_t pc, const char *path) {
    struct agent_unwind_row w = expected_at(r, sorted, n, pc), g = actual_at(t, pc);
    if (w.cfa_type == g.cfa_type && w.cfa_offset == g.cfa_offset && w.rbp_type == g.rbp_type &&
        w.rbp_offset == g.rbp_offset)
        return;
    if (mismatches++ < 10)
        print_message("%s: pc 0x%" PRIx64 ": readelf says cfa %u%+d rbp %u%+d, parser %u%+d "
                      "rbp %u%+d (row at 0x%" PRIx64 ")\n",
                      path, pc, w.cfa_type, w.cfa_offset, w.rbp_type, w.rbp_offset, g.cfa_type,
                      g.cfa_offset, g.rbp_type, g.rbp_offset, (uint64_t)g.pc);
}

/* Compares the parser with readelf on path; returns the rows' counts by cfa_type. */
static void compare_with_readelf(const char *path, size_t counts[5]) {
    memset(counts, 0, 5 * sizeof counts[0]);
    if (access(path, R_OK) != 0) {
        print_message("cfi_test: %s not found, skipped\n", path);
        return;
    }
    ref r = {0};
    read_plt_sections(path, &r);
    if (!read_reference(path, &r))
        fail_msg("readelf -wF %s gave nothing (is binutils installed?)", path);
    agent_cfi_table t;
    strata_error err = {0};
    double t0 = now_ms();
    if (agent_cfi_read_file(path, 0, &t, &err) != 0)
        fail_msg("%s: %s", path, err.message);
    double ms = now_ms() - t0;

    const ref_entry **sorted = calloc(r.n_entries + 1, sizeof *sorted);
    assert_non_null(sorted);
    size_t n = 0;
    for (size_t i = 0; i < r.n_entries; i++)
        if (!r.entries[i].is_cie && r.entries[i].end > r.entries[i].start)
            sorted[n++] = &r.entries[i];
    qsort(sorted, n, sizeof *sorted, fde_order);
    assert_int_equal(t.n_fdes, n);

    for (size_t i = 0; i < t.n_rows; i++) {
        counts[t.rows[i].cfa_type < 5 ? t.rows[i].cfa_type : 0]++;
        if (i > 0) {
            assert_true(t.rows[i - 1].pc < t.rows[i].pc);
            struct agent_unwind_row a = t.rows[i - 1], b = t.rows[i];
            assert_false(a.cfa_type == b.cfa_type && a.cfa_offset == b.cfa_offset &&
                         a.rbp_type == b.rbp_type && a.rbp_offset == b.rbp_offset);
        }
    }
    mismatches = 0;
    size_t points = 0;
    for (size_t i = 0; i < n; i++) {
        const ref_entry *f = sorted[i];
        uint64_t pcs[] = {f->start, f->end - 1, f->end};
        for (size_t k = 0; k < 3; k++, points++)
            check_point(&r, sorted, n, &t, pcs[k], path);
        for (size_t k = 0; k < f->n_rows; k++) {
            uint64_t loc = r.rows[f->first_row + k].loc;
            if (loc < f->start || loc >= f->end)
                continue;
            check_point(&r, sorted, n, &t, loc, path);
            check_point(&r, sorted, n, &t, loc - 1, path);
            points += 2;
        }
    }
    for (size_t i = 0; i < t.n_rows; i++, points++) /* and every row the parser made */
        check_point(&r, sorted, n, &t, t.rows[i].pc, path);
    print_message("cfi_test: %s: %zu FDEs, %zu rows (rsp %zu, rbp %zu, plt %zu, end %zu, fp %zu), "
                  "%zu points checked against readelf, parsed in %.2f ms\n",
                  path, t.n_fdes, t.n_rows, counts[AGENT_CFA_RSP], counts[AGENT_CFA_RBP],
                  counts[AGENT_CFA_PLT], counts[AGENT_CFA_END], counts[AGENT_CFA_FP], points, ms);
    assert_int_equal(mismatches, 0);
    free(sorted);
    agent_cfi_table_free(&t);
    ref_free(&r);
}

static void test_libc(void **state) {
    (void)state;
    size_t counts[5];
    compare_with_readelf("/lib/x86_64-linux-gnu/libc.so.6", counts);
    if (counts[AGENT_CFA_RSP] > 0) {
        assert_true(counts[AGENT_CFA_PLT] >= 1); /* its .plt */
        assert_true(counts[AGENT_CFA_END] >= 1); /* clone's child */
        assert_true(counts[AGENT_CFA_RSP] > 1000);
    }
}

static void test_libstdcxx(void **state) {
    (void)state;
    size_t counts[5];
    compare_with_readelf("/usr/lib/x86_64-linux-gnu/libstdc++.so.6", counts);
}

static void test_libgcc_s(void **state) {
    (void)state;
    size_t counts[5];
    compare_with_readelf("/lib/x86_64-linux-gnu/libgcc_s.so.1", counts);
}

static void test_self(void **state) {
    (void)state;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = '\0';
    size_t counts[5];
    compare_with_readelf(self, counts);
    assert_true(counts[AGENT_CFA_END] >= 1); /* _start */
    assert_true(counts[AGENT_CFA_RSP] > 100);
}

/* The .eh_frame_hdr order and the section walk give the same table on real files, and the
 * stream hands it on in bounded chunks. */
static void test_hdr_matches_walk(void **state) {
    (void)state;
    const char *files[] = {"/lib/x86_64-linux-gnu/libc.so.6",
                           "/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/usr/bin/python3.11",
                           "/usr/lib/gcc/x86_64-linux-gnu/12/cc1", "/proc/self/exe"};
    size_t compared = 0;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        int fd = open(files[i], O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        agent_cfi_table walked = {0}, by_hdr = {0};
        collected_rows w = {&walked, 0, 0}, h = {&by_hdr, 0, 0};
        agent_cfi_counts cw, ch;
        strata_error err = {0};
        if (agent_cfi_stream_fd(fd, 0, false, collect_chunk, &w, &cw, &err) != 0 ||
            agent_cfi_stream_fd(fd, 0, true, collect_chunk, &h, &ch, &err) != 0)
            fail_msg("%s: %s", files[i], err.message);
        close(fd);
        assert_int_equal(cw.rows, walked.n_rows);
        assert_int_equal(ch.rows, by_hdr.n_rows);
        assert_int_equal(cw.fdes, ch.fdes);
        if (walked.n_rows != by_hdr.n_rows ||
            memcmp(walked.rows, by_hdr.rows, walked.n_rows * sizeof *walked.rows) != 0)
            fail_msg("%s: %zu rows walked, %zu by .eh_frame_hdr, not the same", files[i],
                     walked.n_rows, by_hdr.n_rows);
        assert_true(h.largest <= AGENT_CFI_CHUNK_ROWS);
        print_message("cfi_test: %s: %zu rows, %zu FDEs, the same walked and by .eh_frame_hdr\n",
                      files[i], by_hdr.n_rows, ch.fdes);
        agent_cfi_table_free(&walked);
        agent_cfi_table_free(&by_hdr);
        compared++;
    }
    assert_true(compared >= 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prologue_epilogue),
        cmocka_unit_test(test_remember_restore_state),
        cmocka_unit_test(test_advance_variants),
        cmocka_unit_test(test_cfa_expressions),
        cmocka_unit_test(test_return_address_rules),
        cmocka_unit_test(test_rbp_rules),
        cmocka_unit_test(test_table_rules),
        cmocka_unit_test(test_personality_lsda_signal),
        cmocka_unit_test(test_64bit_lengths),
        cmocka_unit_test(test_debug_frame),
        cmocka_unit_test(test_max_rows),
        cmocka_unit_test(test_stream_chunks_and_overrides),
        cmocka_unit_test(test_eh_frame_hdr),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_mutations),
        cmocka_unit_test(test_read_file),
        cmocka_unit_test(test_libc),
        cmocka_unit_test(test_libstdcxx),
        cmocka_unit_test(test_libgcc_s),
        cmocka_unit_test(test_self),
        cmocka_unit_test(test_hdr_matches_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
