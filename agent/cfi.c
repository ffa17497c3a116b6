/*
 * cfi.c - .eh_frame / .debug_frame to unwind rows. See cfi.h.
 *
 * The FDEs are run in order of their start address, found one of two ways:
 *   - by the linker's .eh_frame_hdr table, already sorted: each FDE is read where the table
 *     points and its CIE parsed on first use, so nothing is kept per FDE (the common case);
 *   - else by walking the section: every CIE parsed, every FDE's position noted, each FDE's
 *     range decoded through its CIE's pointer encoding (the empty and unsupported dropped), and
 *     the FDEs sorted by (start, offset).
 * Each FDE's instructions run from its CIE's state; the state at every address step becomes a
 * row (override, gap and merge rules in cfi.h). Rows are handed to the caller's sink in chunks
 * as soon as no later FDE can override them (their pc is below the next FDE's start), so a table
 * of a million rows never sits in this process whole: the agent writes each chunk straight into
 * the BPF array.
 * Only three columns of the register set are tracked - the CFA, %rbp (DWARF 6) and the CIE's
 * return address column - since a row keeps nothing else; the other registers' instructions are
 * decoded (and so validated) and forgotten.
 *
 * Reading is through a cursor that checks every byte against the end of the entry it lies in; a
 * failure names the offset in the section. Offsets that overflow int64 while being scaled by the
 * alignment factors saturate to INT64_MIN, which fits no row field and so becomes FP or LOST.
 */
#include "cfi.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/array.h"
#include "common/varint.h"

#define DWARF_REG_RBP 6
#define DWARF_REG_RSP 7

/* DW_EH_PE_*: the low nibble is the format, bits 4-6 the application, bit 7 indirect. */
#define PE_OMIT 0xff
#define PE_FORMAT_MASK 0x0f
#define PE_APPL_MASK 0x70
#define PE_ABSPTR 0x00
#define PE_ULEB128 0x01
#define PE_UDATA2 0x02
#define PE_UDATA4 0x03
#define PE_UDATA8 0x04
#define PE_SLEB128 0x09
#define PE_SDATA2 0x0a
#define PE_SDATA4 0x0b
#define PE_SDATA8 0x0c
#define PE_PCREL 0x10
#define PE_INDIRECT 0x80

/* The CFA expression of every x86-64 PLT FDE: DW_OP_breg7 (rsp) 8; DW_OP_breg16 (rip) 0;
 * DW_OP_lit15; DW_OP_and; DW_OP_lit11; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus. */
static const uint8_t plt_expression[] = {0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a,
                                         0x3b, 0x2a, 0x33, 0x24, 0x22};

enum rule_kind {
    RULE_UNSET,     /* no instruction said anything: the CIE's default (for rbp: unchanged) */
    RULE_UNDEFINED, /* DW_CFA_undefined */
    RULE_SAME,      /* DW_CFA_same_value */
    RULE_OFFSET,    /* saved at CFA + offset */
    RULE_OTHER,     /* another register, an expression, a value rule */
};

typedef struct rule {
    uint8_t kind;
    int64_t offset;
} rule;

enum cfa_kind {
    CFA_NONE,       /* never defined */
    CFA_REG,        /* register + offset */
    CFA_EXPR_PLT,   /* the PLT expression */
    CFA_EXPR_OTHER, /* any other DWARF expression */
};

typedef struct cfa_state {
    uint8_t cfa_kind;
    uint64_t cfa_reg;
    int64_t cfa_offset;
    rule rbp;
    rule ra;
} cfa_state;

typedef struct cie {
    size_t offset; /* of the entry in the section */
    bool usable;   /* false: well-formed but unsupported; its FDEs are skipped */
    bool has_augmentation_data;
    uint8_t fde_encoding;
    uint64_t code_align;
    int64_t data_align;
    uint64_t ra_reg;
    cfa_state initial; /* after the initial instructions */
} cie;

typedef struct fde_pos {
    size_t offset;  /* of the entry */
    size_t body;    /* just past the CIE pointer */
    size_t end;     /* end of the entry */
    size_t cie_ptr; /* section offset of its CIE */
} fde_pos;

typedef struct fde {
    uint64_t start, end;
    size_t offset;         /* of the entry, for errors and as the sort's tie-break */
    size_t insn, insn_end; /* its instructions */
    size_t cie;            /* index into parser.cies */
} fde;

typedef struct parser {
    const uint8_t *data;
    size_t size;
    uint64_t vaddr;
    bool debug_frame;
    const char *section;
    size_t max_rows;
    strata_error *err;

    cie *cies;
    size_t n_cies, cap_cies;
    fde_pos *positions;
    size_t n_positions, cap_positions;
    fde *fdes;
    size_t n_fdes, cap_fdes;

    /* Output. Rows are handed on in chunks; the ones at or past next_start (the start of the
     * next FDE in order, which may override them) wait in `pending`. */
    agent_cfi_rows_fn out;
    void *out_ctx;
    struct agent_unwind_row *pending;
    size_t n_pending, cap_pending;
    struct agent_unwind_row last_out; /* the last row handed on (valid when n_out > 0) */
    size_t n_out;
    uint64_t next_start;
    size_t n_fdes_used;
} parser;

/* A read position inside [pos, end) of the section. */
typedef struct cursor {
    size_t pos, end;
} cursor;

static int malformed(parser *ps, size_t at, const char *what) {
    return strata_error_set(ps->err, STRATA_INVALID_ARGUMENT, "%s offset 0x%zx: %s", ps->section,
                            at, what);
}

static bool get_bytes(const parser *ps, cursor *c, size_t n, const uint8_t **out) {
    if (c->end - c->pos < n)
        return false;
    *out = ps->data + c->pos;
    c->pos += n;
    return true;
}

static bool get_uint(const parser *ps, cursor *c, size_t n, uint64_t *out) {
    const uint8_t *b;
    if (!get_bytes(ps, c, n, &b))
        return false;
    uint64_t v = 0;
    for (size_t i = n; i > 0; i--)
        v = (v << 8) | b[i - 1];
    *out = v;
    return true;
}

static bool get_sint(const parser *ps, cursor *c, size_t n, int64_t *out) {
    uint64_t v;
    if (!get_uint(ps, c, n, &v))
        return false;
    if (n < 8 && (v >> (8 * n - 1)) & 1)
        v |= ~UINT64_C(0) << (8 * n);
    *out = strata_u64_as_i64(v);
    return true;
}

static bool get_uleb(const parser *ps, cursor *c, uint64_t *out) {
    const uint8_t *p = ps->data + c->pos;
    if (!strata_uvarint_get(&p, ps->data + c->end, out))
        return false;
    c->pos = (size_t)(p - ps->data);
    return true;
}

/* Signed LEB128: 7 bits a byte, the sign in bit 6 of the last. At most 10 bytes; the tenth must
 * be a pure sign extension of bit 63. */
static bool get_sleb(const parser *ps, cursor *c, int64_t *out) {
    uint64_t v = 0;
    unsigned shift = 0;
    size_t pos = c->pos;
    for (;;) {
        if (pos >= c->end)
            return false;
        uint8_t byte = ps->data[pos++];
        if (shift == 63) {
            if (byte != 0x00 && byte != 0x7f)
                return false;
            v |= (uint64_t)(byte & 1) << 63;
            break;
        }
        v |= (uint64_t)(byte & 0x7f) << shift;
        shift += 7;
        if (byte < 0x80) {
            if (shift < 64 && (byte & 0x40))
                v |= ~UINT64_C(0) << shift;
            break;
        }
    }
    c->pos = pos;
    *out = strata_u64_as_i64(v);
    return true;
}

/* Reads a pointer encoded as enc. apply: add the field's address for pcrel (the FDE's start);
 * false reads the format only (its length). Returns 0, 1 when the encoding is not supported
 * (*c then unusable) or -1 when the bytes run out. */
static int get_encoded(const parser *ps, cursor *c, uint8_t enc, bool apply, uint64_t *out) {
    uint64_t field = ps->vaddr + c->pos;
    uint64_t v;
    int64_t s;
    switch (enc & PE_FORMAT_MASK) {
        case PE_ABSPTR:
        case PE_UDATA8:
            if (!get_uint(ps, c, 8, &v))
                return -1;
            break;
        case PE_UDATA2:
            if (!get_uint(ps, c, 2, &v))
                return -1;
            break;
        case PE_UDATA4:
            if (!get_uint(ps, c, 4, &v))
                return -1;
            break;
        case PE_ULEB128:
            if (!get_uleb(ps, c, &v))
                return -1;
            break;
        case PE_SLEB128:
            if (!get_sleb(ps, c, &s))
                return -1;
            v = (uint64_t)s;
            break;
        case PE_SDATA2:
        case PE_SDATA4:
        case PE_SDATA8: {
            size_t n = (enc & PE_FORMAT_MASK) == PE_SDATA2   ? 2
                       : (enc & PE_FORMAT_MASK) == PE_SDATA4 ? 4
                                                             : 8;
            if (!get_sint(ps, c, n, &s))
                return -1;
            v = (uint64_t)s;
            break;
        }
        default:
            return 1;
    }
    if (apply) {
        switch (enc & PE_APPL_MASK) {
            case 0:
                break;
            case PE_PCREL:
                v += field;
                break;
            default: /* textrel, datarel, funcrel, aligned: no base known here */
                return 1;
        }
    }
    *out = v;
    return 0;
}

/* a * b, or INT64_MIN when it does not fit. */
static int64_t mul_sat(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return INT64_MIN;
    return r;
}

static int64_t u64_to_i64_sat(uint64_t v) {
    return v > (uint64_t)INT64_MAX ? INT64_MIN : (int64_t)v;
}

/* The state a CFA program runs on. */
typedef struct machine {
    const cie *cie;
    cfa_state st;
    cfa_state stack[AGENT_CFI_MAX_STATE_DEPTH];
    size_t depth;
    bool fde;      /* false: a CIE's initial instructions (no rows, no advancing) */
    bool past_end; /* the location went past the FDE's end: no more rows */
    uint64_t loc, end;
    uint8_t fde_encoding;
} machine;

static void set_rule(machine *m, uint64_t reg, rule r) {
    if (reg == DWARF_REG_RBP)
        m->st.rbp = r;
    if (reg == m->cie->ra_reg)
        m->st.ra = r;
}

static void restore_rule(machine *m, uint64_t reg) {
    rule unset = {RULE_UNSET, 0};
    if (reg == DWARF_REG_RBP)
        m->st.rbp = m->fde ? m->cie->initial.rbp : unset;
    if (reg == m->cie->ra_reg)
        m->st.ra = m->fde ? m->cie->initial.ra : unset;
}

static bool fits(int64_t v, int64_t lo, int64_t hi) {
    return v >= lo && v <= hi;
}

static struct agent_unwind_row make_row(uint64_t pc, const cfa_state *s) {
    struct agent_unwind_row r = {.pc = pc, .cfa_type = AGENT_CFA_FP, .rbp_type = AGENT_RBP_SAME};
    if (s->ra.kind == RULE_UNDEFINED) {
        r.cfa_type = AGENT_CFA_END;
        return r;
    }
    if (s->ra.kind != RULE_OFFSET || s->ra.offset != -8)
        return r;
    if (s->cfa_kind == CFA_REG) {
        if (!fits(s->cfa_offset, INT32_MIN, INT32_MAX))
            return r;
        if (s->cfa_reg == DWARF_REG_RSP)
            r.cfa_type = AGENT_CFA_RSP;
        else if (s->cfa_reg == DWARF_REG_RBP)
            r.cfa_type = AGENT_CFA_RBP;
        else
            return r;
        r.cfa_offset = (int32_t)s->cfa_offset;
    } else if (s->cfa_kind == CFA_EXPR_PLT) {
        r.cfa_type = AGENT_CFA_PLT;
    } else {
        return r;
    }
    switch (s->rbp.kind) {
        case RULE_UNSET:
        case RULE_SAME:
            break;
        case RULE_OFFSET:
            if (fits(s->rbp.offset, INT16_MIN, INT16_MAX)) {
                r.rbp_type = AGENT_RBP_AT_CFA;
                r.rbp_offset = (int16_t)s->rbp.offset;
            } else {
                r.rbp_type = AGENT_RBP_LOST;
            }
            break;
        default:
            r.rbp_type = AGENT_RBP_LOST;
            break;
    }
    return r;
}

static bool same_rules(const struct agent_unwind_row *a, const struct agent_unwind_row *b) {
    return a->cfa_type == b->cfa_type && a->cfa_offset == b->cfa_offset &&
           a->rbp_type == b->rbp_type && a->rbp_offset == b->rbp_offset;
}

/* Hands on the pending rows below `below` (a prefix: pending rows are sorted by pc). */
static int flush_rows(parser *ps, uint64_t below) {
    size_t n = 0;
    while (n < ps->n_pending && ps->pending[n].pc < below)
        n++;
    if (n == 0)
        return 0;
    if (ps->out(ps->out_ctx, ps->pending, n, ps->err) != 0)
        return -1;
    ps->last_out = ps->pending[n - 1];
    ps->n_out += n;
    memmove(ps->pending, ps->pending + n, (ps->n_pending - n) * sizeof *ps->pending);
    ps->n_pending -= n;
    return 0;
}

static const struct agent_unwind_row *last_row(const parser *ps) {
    if (ps->n_pending > 0)
        return &ps->pending[ps->n_pending - 1];
    return ps->n_out > 0 ? &ps->last_out : NULL;
}

/* Appends a row at a pc past the last one, merging it into the last when the rules are equal.
 * A full pending buffer hands on the rows no later FDE can override. */
static int append_row(parser *ps, struct agent_unwind_row r) {
    const struct agent_unwind_row *last = last_row(ps);
    if (last != NULL && same_rules(last, &r))
        return 0;
    if (ps->max_rows != 0 && ps->n_out + ps->n_pending >= ps->max_rows)
        return strata_error_set(ps->err, STRATA_RESOURCE_EXHAUSTED,
                                "%s: the unwind table exceeds %zu rows", ps->section, ps->max_rows);
    if (ps->n_pending == ps->cap_pending && flush_rows(ps, ps->next_start) != 0)
        return -1;
    if (STRATA_ARRAY_RESERVE_OR_OOM(ps->pending, ps->cap_pending, ps->n_pending + 1, ps->err) != 0)
        return -1;
    ps->pending[ps->n_pending++] = r;
    return 0;
}

static int emit(parser *ps, machine *m) {
    return append_row(ps, make_row(m->loc, &m->st));
}

/* Moves the location by delta bytes (an FDE's program only), emitting the row that held so far. */
static int advance(parser *ps, machine *m, uint64_t delta) {
    if (!m->fde || m->past_end || delta == 0)
        return 0;
    if (emit(ps, m) != 0)
        return -1;
    if (delta >= m->end - m->loc)
        m->past_end = true;
    else
        m->loc += delta;
    return 0;
}

static int advance_units(parser *ps, machine *m, uint64_t units) {
    uint64_t delta;
    if (__builtin_mul_overflow(units, m->cie->code_align, &delta))
        delta = UINT64_MAX;
    return advance(ps, m, delta);
}

static int64_t factored(const machine *m, uint64_t units) {
    return mul_sat(u64_to_i64_sat(units), m->cie->data_align);
}

static int64_t factored_sf(const machine *m, int64_t units) {
    return mul_sat(units, m->cie->data_align);
}

/* Skips a DWARF expression block (ULEB length, bytes); *block points at its bytes. */
static bool get_block(const parser *ps, cursor *c, const uint8_t **block, uint64_t *len) {
    if (!get_uleb(ps, c, len) || *len > c->end - c->pos)
        return false;
    *block = ps->data + c->pos;
    c->pos += (size_t)*len;
    return true;
}

/* Runs the DW_CFA program in [c.pos, c.end). */
static int run_program(parser *ps, machine *m, cursor c) {
    while (c.pos < c.end) {
        size_t at = c.pos;
        uint8_t op = ps->data[c.pos++];
        uint64_t reg = 0, u = 0, u2 = 0;
        int64_t s = 0;
        const uint8_t *block;
        bool ok = true;
        switch (op >> 6) {
            case 1: /* DW_CFA_advance_loc */
                if (advance_units(ps, m, op & 0x3f) != 0)
                    return -1;
                continue;
            case 2: /* DW_CFA_offset */
                if (!get_uleb(ps, &c, &u))
                    return malformed(ps, at, "truncated DW_CFA_offset");
                set_rule(m, op & 0x3f, (rule){RULE_OFFSET, factored(m, u)});
                continue;
            case 3: /* DW_CFA_restore */
                restore_rule(m, op & 0x3f);
                continue;
            default:
                break;
        }
        switch (op) {
            case 0x00: /* DW_CFA_nop */
                break;
            case 0x01: { /* DW_CFA_set_loc */
                uint64_t addr;
                int rc = get_encoded(ps, &c, m->fde_encoding, true, &addr);
                if (rc < 0)
                    return malformed(ps, at, "truncated DW_CFA_set_loc");
                if (rc > 0)
                    return malformed(ps, at, "DW_CFA_set_loc with an unsupported encoding");
                if (m->fde && !m->past_end) {
                    if (addr < m->loc)
                        return malformed(ps, at, "DW_CFA_set_loc moves the location backwards");
                    if (advance(ps, m, addr - m->loc) != 0)
                        return -1;
                }
                break;
            }
            case 0x02: /* DW_CFA_advance_loc1 */
            case 0x03: /* DW_CFA_advance_loc2 */
            case 0x04: /* DW_CFA_advance_loc4 */
            case 0x1d: /* DW_CFA_MIPS_advance_loc8 */
                if (!get_uint(ps, &c, op == 0x1d ? 8 : (size_t)1 << (op - 2), &u))
                    return malformed(ps, at, "truncated DW_CFA_advance_loc");
                if (advance_units(ps, m, u) != 0)
                    return -1;
                break;
            case 0x05: /* DW_CFA_offset_extended */
                ok = get_uleb(ps, &c, &reg) && get_uleb(ps, &c, &u);
                if (ok)
                    set_rule(m, reg, (rule){RULE_OFFSET, factored(m, u)});
                break;
            case 0x06: /* DW_CFA_restore_extended */
                ok = get_uleb(ps, &c, &reg);
                if (ok)
                    restore_rule(m, reg);
                break;
            case 0x07: /* DW_CFA_undefined */
            case 0x08: /* DW_CFA_same_value */
                ok = get_uleb(ps, &c, &reg);
                if (ok)
                    set_rule(m, reg, (rule){op == 0x07 ? RULE_UNDEFINED : RULE_SAME, 0});
                break;
            case 0x09: /* DW_CFA_register */
                ok = get_uleb(ps, &c, &reg) && get_uleb(ps, &c, &u2);
                if (ok)
                    set_rule(m, reg, (rule){RULE_OTHER, 0});
                break;
            case 0x0a: /* DW_CFA_remember_state */
                if (m->depth >= AGENT_CFI_MAX_STATE_DEPTH)
                    return malformed(ps, at, "DW_CFA_remember_state nested too deep");
                m->stack[m->depth++] = m->st;
                break;
            case 0x0b: /* DW_CFA_restore_state */
                if (m->depth == 0)
                    return malformed(ps, at, "DW_CFA_restore_state without remember_state");
                m->st = m->stack[--m->depth];
                break;
            case 0x0c: /* DW_CFA_def_cfa */
                ok = get_uleb(ps, &c, &reg) && get_uleb(ps, &c, &u);
                if (ok) {
                    m->st.cfa_kind = CFA_REG;
                    m->st.cfa_reg = reg;
                    m->st.cfa_offset = u64_to_i64_sat(u);
                }
                break;
            case 0x12: /* DW_CFA_def_cfa_sf */
                ok = get_uleb(ps, &c, &reg) && get_sleb(ps, &c, &s);
                if (ok) {
                    m->st.cfa_kind = CFA_REG;
                    m->st.cfa_reg = reg;
                    m->st.cfa_offset = factored_sf(m, s);
                }
                break;
            case 0x0d: /* DW_CFA_def_cfa_register */
                ok = get_uleb(ps, &c, &reg);
                if (ok) { /* the offset stays, as in libgcc and readelf */
                    m->st.cfa_kind = CFA_REG;
                    m->st.cfa_reg = reg;
                }
                break;
            case 0x0e: /* DW_CFA_def_cfa_offset (the rule's kind stays, as in libgcc) */
                ok = get_uleb(ps, &c, &u);
                if (ok)
                    m->st.cfa_offset = u64_to_i64_sat(u);
                break;
            case 0x13: /* DW_CFA_def_cfa_offset_sf */
                ok = get_sleb(ps, &c, &s);
                if (ok)
                    m->st.cfa_offset = factored_sf(m, s);
                break;
            case 0x0f: /* DW_CFA_def_cfa_expression */
                ok = get_block(ps, &c, &block, &u);
                if (ok) {
                    bool plt = u == sizeof plt_expression &&
                               memcmp(block, plt_expression, sizeof plt_expression) == 0;
                    m->st.cfa_kind = plt ? CFA_EXPR_PLT : CFA_EXPR_OTHER;
                }
                break;
            case 0x10: /* DW_CFA_expression */
            case 0x16: /* DW_CFA_val_expression */
                ok = get_uleb(ps, &c, &reg) && get_block(ps, &c, &block, &u);
                if (ok)
                    set_rule(m, reg, (rule){RULE_OTHER, 0});
                break;
            case 0x11: /* DW_CFA_offset_extended_sf */
                ok = get_uleb(ps, &c, &reg) && get_sleb(ps, &c, &s);
                if (ok)
                    set_rule(m, reg, (rule){RULE_OFFSET, factored_sf(m, s)});
                break;
            case 0x14: /* DW_CFA_val_offset */
                ok = get_uleb(ps, &c, &reg) && get_uleb(ps, &c, &u);
                if (ok)
                    set_rule(m, reg, (rule){RULE_OTHER, 0});
                break;
            case 0x15: /* DW_CFA_val_offset_sf */
                ok = get_uleb(ps, &c, &reg) && get_sleb(ps, &c, &s);
                if (ok)
                    set_rule(m, reg, (rule){RULE_OTHER, 0});
                break;
            case 0x2e: /* DW_CFA_GNU_args_size */
                ok = get_uleb(ps, &c, &u);
                break;
            case 0x2f: /* DW_CFA_GNU_negative_offset_extended */
                ok = get_uleb(ps, &c, &reg) && get_uleb(ps, &c, &u);
                if (ok) {
                    int64_t off = factored(m, u);
                    set_rule(m, reg, (rule){RULE_OFFSET, off == INT64_MIN ? INT64_MIN : -off});
                }
                break;
            default: {
                char what[64];
                snprintf(what, sizeof what, "unknown DW_CFA opcode 0x%02x", op);
                return malformed(ps, at, what);
            }
        }
        if (!ok)
            return malformed(ps, at, "truncated or overlong operand of a DW_CFA instruction");
    }
    return 0;
}

/* Parses the CIE whose id field ended at c.pos (entry at offset, ending at c.end). */
static int parse_cie(parser *ps, size_t offset, cursor c, cie *out) {
    memset(out, 0, sizeof *out);
    out->offset = offset;
    out->usable = true;
    out->fde_encoding = PE_ABSPTR;
    out->initial.cfa_kind = CFA_NONE;
    uint64_t version;
    if (!get_uint(ps, &c, 1, &version))
        return malformed(ps, offset, "truncated CIE");
    const char *aug = (const char *)ps->data + c.pos;
    const uint8_t *nul = memchr(ps->data + c.pos, 0, c.end - c.pos);
    if (nul == NULL)
        return malformed(ps, offset, "CIE augmentation string runs past the entry");
    size_t aug_len = (size_t)(nul - (ps->data + c.pos));
    c.pos += aug_len + 1;
    bool known_version = ps->debug_frame ? (version == 1 || version == 3 || version == 4)
                                         : (version == 1 || version == 3);
    if (!known_version) { /* the rest of the layout is unknown: skip its FDEs */
        out->usable = false;
        return 0;
    }
    if (version == 4) {
        uint64_t address_size, segment_size;
        if (!get_uint(ps, &c, 1, &address_size) || !get_uint(ps, &c, 1, &segment_size))
            return malformed(ps, offset, "truncated CIE");
        if (address_size != 8 || segment_size != 0)
            out->usable = false;
    }
    uint64_t ra;
    bool ok = get_uleb(ps, &c, &out->code_align) && get_sleb(ps, &c, &out->data_align) &&
              (version == 1 ? get_uint(ps, &c, 1, &ra) : get_uleb(ps, &c, &ra));
    if (!ok)
        return malformed(ps, offset, "truncated CIE");
    out->ra_reg = ra;
    if (aug_len > 0 && aug[0] == 'z' && !ps->debug_frame) {
        uint64_t len;
        if (!get_uleb(ps, &c, &len) || len > c.end - c.pos)
            return malformed(ps, offset, "CIE augmentation data runs past the entry");
        cursor a = {c.pos, c.pos + (size_t)len};
        c.pos = a.end;
        out->has_augmentation_data = true;
        for (size_t i = 1; i < aug_len && out->usable; i++) {
            uint64_t enc, ignored;
            switch (aug[i]) {
                case 'R':
                    if (!get_uint(ps, &a, 1, &enc))
                        return malformed(ps, offset, "truncated CIE augmentation data");
                    out->fde_encoding = (uint8_t)enc;
                    break;
                case 'L':
                    if (!get_uint(ps, &a, 1, &enc))
                        return malformed(ps, offset, "truncated CIE augmentation data");
                    break;
                case 'P': {
                    if (!get_uint(ps, &a, 1, &enc))
                        return malformed(ps, offset, "truncated CIE augmentation data");
                    if (enc == PE_OMIT)
                        break;
                    int rc = get_encoded(ps, &a, (uint8_t)(enc & ~PE_INDIRECT), false, &ignored);
                    if (rc < 0)
                        return malformed(ps, offset, "truncated CIE personality pointer");
                    if (rc > 0) /* an encoding of unknown size: what follows is unknown */
                        out->usable = false;
                    break;
                }
                case 'S': /* signal frame: the rows are the same */
                case 'B': /* AArch64 BTI, G: MTE: nothing in the data */
                case 'G':
                    break;
                default:
                    out->usable = false;
                    break;
            }
        }
    } else if (aug_len > 0) {
        out->usable = false; /* "eh", or anything without 'z': FDEs of unknown layout */
    }
    uint8_t fenc = out->fde_encoding;
    if (fenc == PE_OMIT || (fenc & PE_INDIRECT) != 0)
        out->usable = false;
    if (!out->usable)
        return 0;
    machine m = {.cie = out, .fde = false, .fde_encoding = fenc};
    m.st.cfa_kind = CFA_NONE;
    if (run_program(ps, &m, c) != 0)
        return -1;
    out->initial = m.st;
    return 0;
}

/* One entry's header: the entry at offset off, its body cursor (just past the id), its id and
 * where the id was read. Returns 1 with *next past the entry, 0 for .eh_frame's terminator
 * (*next = size), -1 when malformed. A zero length in .debug_frame is an empty entry: *is_empty. */
typedef struct entry {
    cursor body;
    uint64_t id;
    size_t id_pos;
    size_t next;
    bool is_cie;
    bool is_empty;
} entry;

static int read_entry(parser *ps, size_t off, entry *e) {
    cursor c = {off, ps->size};
    uint64_t len;
    size_t id_size = 4;
    memset(e, 0, sizeof *e);
    if (!get_uint(ps, &c, 4, &len))
        return malformed(ps, off, "truncated entry length");
    if (len == 0) {
        e->next = ps->debug_frame ? c.pos : ps->size;
        e->is_empty = true;
        return ps->debug_frame ? 1 : 0;
    }
    if (len == 0xffffffff) {
        if (!get_uint(ps, &c, 8, &len))
            return malformed(ps, off, "truncated 64-bit entry length");
        id_size = 8;
    } else if (len >= 0xfffffff0) {
        return malformed(ps, off, "reserved entry length");
    }
    if (len > ps->size - c.pos)
        return malformed(ps, off, "entry length runs past the end of the section");
    e->id_pos = c.pos;
    c.end = c.pos + (size_t)len;
    if (!get_uint(ps, &c, id_size, &e->id))
        return malformed(ps, off, "entry too short for its CIE id");
    uint64_t cie_id = ps->debug_frame ? (id_size == 4 ? 0xffffffff : UINT64_MAX) : 0;
    e->is_cie = e->id == cie_id;
    e->body = c;
    e->next = c.end;
    return 1;
}

/* The section offset of the CIE an FDE entry points at, or -1 (malformed). */
static int fde_cie_offset(parser *ps, size_t off, const entry *e, size_t *target) {
    uint64_t t;
    if (ps->debug_frame) {
        t = e->id;
    } else {
        if (e->id > e->id_pos)
            return malformed(ps, off, "FDE's CIE pointer points before the section");
        t = e->id_pos - e->id;
    }
    if (t >= ps->size)
        return malformed(ps, off, "FDE's CIE pointer points past the section");
    *target = (size_t)t;
    return 0;
}

/* Walks the entries: parses CIEs into ps->cies and notes FDEs in ps->positions. */
static int walk_entries(parser *ps) {
    size_t off = 0;
    while (off < ps->size) {
        entry e;
        int rc = read_entry(ps, off, &e);
        if (rc < 0)
            return -1;
        if (rc == 0)
            break; /* the terminator */
        if (e.is_empty) {
            off = e.next;
            continue;
        }
        if (e.is_cie) {
            if (STRATA_ARRAY_RESERVE_OR_OOM(ps->cies, ps->cap_cies, ps->n_cies + 1, ps->err) != 0)
                return -1;
            if (parse_cie(ps, off, e.body, &ps->cies[ps->n_cies]) != 0)
                return -1;
            ps->n_cies++;
        } else {
            size_t target = 0;
            if (fde_cie_offset(ps, off, &e, &target) != 0)
                return -1;
            if (STRATA_ARRAY_RESERVE_OR_OOM(ps->positions, ps->cap_positions, ps->n_positions + 1,
                                            ps->err) != 0)
                return -1;
            ps->positions[ps->n_positions++] =
                (fde_pos){.offset = off, .body = e.body.pos, .end = e.body.end, .cie_ptr = target};
        }
        off = e.next;
    }
    return 0;
}

/* The index where a CIE at offset is or would be inserted in the sorted ps->cies. */
static size_t cie_slot(const parser *ps, size_t offset) {
    size_t lo = 0, hi = ps->n_cies;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ps->cies[mid].offset < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static const cie *find_cie(const parser *ps, size_t offset, size_t *index) {
    size_t lo = cie_slot(ps, offset);
    if (lo < ps->n_cies && ps->cies[lo].offset == offset) {
        *index = lo;
        return &ps->cies[lo];
    }
    return NULL;
}

/* Decodes the FDE noted at p through its CIE ce (index ci): 1 with *out, 0 when it is skipped
 * (empty, unsupported), -1 when malformed. */
static int decode_fde(parser *ps, const fde_pos *p, const cie *ce, size_t ci, fde *out) {
    if (!ce->usable)
        return 0;
    cursor c = {p->body, p->end};
    uint64_t start, range;
    uint8_t enc = ps->debug_frame ? PE_ABSPTR : ce->fde_encoding;
    int rc = get_encoded(ps, &c, enc, true, &start);
    if (rc == 0)
        rc = get_encoded(ps, &c, enc, false, &range);
    if (rc < 0)
        return malformed(ps, p->offset, "truncated FDE address range");
    if (rc > 0)
        return 0;
    if (ce->has_augmentation_data) {
        uint64_t len;
        if (!get_uleb(ps, &c, &len) || len > c.end - c.pos)
            return malformed(ps, p->offset, "FDE augmentation data runs past the entry");
        c.pos += (size_t)len;
    }
    if ((enc & PE_FORMAT_MASK) == PE_UDATA2 || (enc & PE_FORMAT_MASK) == PE_SDATA2)
        range &= 0xffff; /* the length is unsigned whatever the format */
    else if ((enc & PE_FORMAT_MASK) == PE_UDATA4 || (enc & PE_FORMAT_MASK) == PE_SDATA4)
        range &= 0xffffffff;
    if (range == 0 || start > UINT64_MAX - range)
        return 0;
    *out = (fde){.start = start,
                 .end = start + range,
                 .offset = p->offset,
                 .insn = c.pos,
                 .insn_end = c.end,
                 .cie = ci};
    return 1;
}

/* Decodes every noted FDE's range into ps->fdes (skipping empty and unsupported ones). */
static int decode_fdes(parser *ps) {
    for (size_t i = 0; i < ps->n_positions; i++) {
        const fde_pos *p = &ps->positions[i];
        size_t ci;
        const cie *ce = find_cie(ps, p->cie_ptr, &ci);
        if (ce == NULL)
            return malformed(ps, p->offset, "FDE's CIE pointer does not point at a CIE");
        if (STRATA_ARRAY_RESERVE_OR_OOM(ps->fdes, ps->cap_fdes, ps->n_fdes + 1, ps->err) != 0)
            return -1;
        int rc = decode_fde(ps, p, ce, ci, &ps->fdes[ps->n_fdes]);
        if (rc < 0)
            return -1;
        ps->n_fdes += (size_t)rc;
    }
    return 0;
}

static int fde_compare(const void *a, const void *b) {
    const fde *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Runs one FDE (FDEs come in order of start) and appends its rows. */
static int run_fde(parser *ps, const fde *f) {
    const cie *ce = &ps->cies[f->cie];
    while (ps->n_pending > 0 && ps->pending[ps->n_pending - 1].pc >= f->start)
        ps->n_pending--; /* this FDE overrides the previous one from its start */
    machine m = {.cie = ce,
                 .st = ce->initial,
                 .fde = true,
                 .loc = f->start,
                 .end = f->end,
                 .fde_encoding = ps->debug_frame ? PE_ABSPTR : ce->fde_encoding};
    if (run_program(ps, &m, (cursor){f->insn, f->insn_end}) != 0)
        return -1;
    if (!m.past_end && emit(ps, &m) != 0)
        return -1;
    if (append_row(ps, (struct agent_unwind_row){.pc = f->end, .cfa_type = AGENT_CFA_FP}) != 0)
        return -1;
    ps->n_fdes_used++;
    return 0;
}

/* The FDEs found by walking the whole section, sorted by (start, offset). */
static int rows_from_walk(parser *ps) {
    if (walk_entries(ps) != 0 || decode_fdes(ps) != 0)
        return -1;
    free(ps->positions); /* not needed past decoding */
    ps->positions = NULL;
    ps->n_positions = ps->cap_positions = 0;
    if (ps->n_fdes > 1)
        qsort(ps->fdes, ps->n_fdes, sizeof ps->fdes[0], fde_compare);
    for (size_t i = 0; i < ps->n_fdes; i++) {
        ps->next_start = i + 1 < ps->n_fdes ? ps->fdes[i + 1].start : UINT64_MAX;
        if (run_fde(ps, &ps->fdes[i]) != 0)
            return -1;
    }
    return 0;
}

/* --- .eh_frame_hdr ---------------------------------------------------------------------------
 * The linker's binary-search table lists every FDE by start address, already sorted: read in
 * its order, the FDEs need no array of their own and rows come out in order as they are made. */

#define HDR_TABLE_ENCODING 0x3b /* DW_EH_PE_datarel | DW_EH_PE_sdata4: what every linker writes */

typedef struct hdr_table {
    const uint8_t *entries; /* count pairs of int32 (start, FDE address), relative to base */
    size_t count;
    uint64_t base; /* the .eh_frame_hdr's link-time address */
} hdr_table;

static int32_t hdr_word(const uint8_t *p) {
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    int32_t s;
    memcpy(&s, &v, sizeof s);
    return s;
}

/* Bytes taken by a fixed-size encoded value, 0 for a variable-size or unknown one. */
static size_t encoded_size(uint8_t enc) {
    switch (enc & PE_FORMAT_MASK) {
        case PE_UDATA2:
        case PE_SDATA2:
            return 2;
        case PE_UDATA4:
        case PE_SDATA4:
            return 4;
        case PE_ABSPTR:
        case PE_UDATA8:
        case PE_SDATA8:
            return 8;
        default:
            return 0;
    }
}

/* The table of hdr, when it has the layout linkers write (version 1, datarel sdata4 pairs,
 * starts strictly increasing) and fits; false otherwise (the section is then walked). */
static bool hdr_table_read(const uint8_t *hdr, size_t size, uint64_t vaddr, hdr_table *t) {
    if (hdr == NULL || size < 4 || hdr[0] != 1 || hdr[1] == PE_OMIT || hdr[2] == PE_OMIT ||
        hdr[3] != HDR_TABLE_ENCODING)
        return false;
    size_t ptr_size = encoded_size(hdr[1]), count_size = encoded_size(hdr[2]);
    if (ptr_size == 0 || (count_size != 4 && count_size != 8) || size < 4 + ptr_size + count_size)
        return false;
    const uint8_t *p = hdr + 4 + ptr_size;
    uint64_t count = 0;
    for (size_t i = count_size; i > 0; i--)
        count = (count << 8) | p[i - 1];
    size_t table = 4 + ptr_size + count_size;
    if (count == 0 || count > (size - table) / 8)
        return false;
    t->entries = hdr + table;
    t->count = (size_t)count;
    t->base = vaddr;
    for (size_t i = 1; i < t->count; i++)
        if (hdr_word(t->entries + 8 * i) <= hdr_word(t->entries + 8 * (i - 1)))
            return false;
    return true;
}

/* The CIE at offset, parsed on first use and kept in the sorted ps->cies. */
static int cie_at(parser *ps, size_t offset, size_t *index) {
    if (find_cie(ps, offset, index) != NULL)
        return 0;
    entry e;
    int rc = read_entry(ps, offset, &e);
    if (rc <= 0 || e.is_empty || !e.is_cie)
        return rc < 0 ? -1 : malformed(ps, offset, "FDE's CIE pointer does not point at a CIE");
    cie parsed;
    if (parse_cie(ps, offset, e.body, &parsed) != 0)
        return -1;
    if (STRATA_ARRAY_RESERVE_OR_OOM(ps->cies, ps->cap_cies, ps->n_cies + 1, ps->err) != 0)
        return -1;
    size_t at = cie_slot(ps, offset);
    memmove(&ps->cies[at + 1], &ps->cies[at], (ps->n_cies - at) * sizeof *ps->cies);
    ps->cies[at] = parsed;
    ps->n_cies++;
    *index = at;
    return 0;
}

/* The FDEs in the order of the .eh_frame_hdr table t. An entry's FDE must start where the table
 * says (else the section is malformed). */
static int rows_from_hdr(parser *ps, const hdr_table *t) {
    for (size_t i = 0; i < t->count; i++) {
        uint64_t start = t->base + (uint64_t)(int64_t)hdr_word(t->entries + 8 * i);
        uint64_t address = t->base + (uint64_t)(int64_t)hdr_word(t->entries + 8 * i + 4);
        ps->next_start = i + 1 < t->count
                             ? t->base + (uint64_t)(int64_t)hdr_word(t->entries + 8 * (i + 1))
                             : UINT64_MAX;
        uint64_t off = address - ps->vaddr;
        if (address < ps->vaddr || off >= ps->size)
            return strata_error_set(ps->err, STRATA_INVALID_ARGUMENT,
                                    ".eh_frame_hdr entry %zu points outside .eh_frame", i);
        entry e;
        int rc = read_entry(ps, (size_t)off, &e);
        if (rc < 0)
            return -1;
        if (rc == 0 || e.is_empty || e.is_cie)
            return malformed(ps, (size_t)off, ".eh_frame_hdr entry does not point at an FDE");
        size_t target = 0, ci = 0;
        if (fde_cie_offset(ps, (size_t)off, &e, &target) != 0 || cie_at(ps, target, &ci) != 0)
            return -1;
        fde_pos p = {.offset = (size_t)off, .body = e.body.pos, .end = e.body.end};
        fde f;
        rc = decode_fde(ps, &p, &ps->cies[ci], ci, &f);
        if (rc < 0)
            return -1;
        if (rc == 0)
            continue;
        if (f.start != start)
            return malformed(ps, (size_t)off, "FDE starts elsewhere than .eh_frame_hdr says");
        if (run_fde(ps, &f) != 0)
            return -1;
    }
    return 0;
}

/* --- entry points ------------------------------------------------------------------------- */

int agent_cfi_stream(const agent_cfi_source *src, size_t max_rows, agent_cfi_rows_fn out, void *ctx,
                     agent_cfi_counts *counts, strata_error *err) {
    counts->rows = counts->fdes = 0;
    if (src->frame == NULL && src->frame_size > 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "CFI section without data");
    parser ps = {.data = src->frame,
                 .size = src->frame_size,
                 .vaddr = src->frame_vaddr,
                 .debug_frame = src->is_debug_frame,
                 .section = src->is_debug_frame ? ".debug_frame" : ".eh_frame",
                 .max_rows = max_rows,
                 .err = err,
                 .out = out,
                 .out_ctx = ctx,
                 .next_start = UINT64_MAX};
    int rc = -1;
    if (STRATA_ARRAY_RESERVE_OR_OOM(ps.pending, ps.cap_pending, AGENT_CFI_CHUNK_ROWS, err) != 0)
        goto done;
    hdr_table t;
    bool by_hdr =
        !src->is_debug_frame && hdr_table_read(src->hdr, src->hdr_size, src->hdr_vaddr, &t);
    if ((by_hdr ? rows_from_hdr(&ps, &t) : rows_from_walk(&ps)) != 0 ||
        flush_rows(&ps, UINT64_MAX) != 0)
        goto done;
    counts->rows = ps.n_out;
    counts->fdes = ps.n_fdes_used;
    rc = 0;
done:
    free(ps.pending);
    free(ps.cies);
    free(ps.positions);
    free(ps.fdes);
    return rc;
}

/* The array sink of agent_cfi_parse_section and agent_cfi_read_fd. */
typedef struct collected {
    agent_cfi_table *t;
    size_t cap;
} collected;

static int collect_rows(void *ctx, const struct agent_unwind_row *rows, size_t n,
                        strata_error *err) {
    collected *c = ctx;
    if (STRATA_ARRAY_RESERVE_OR_OOM(c->t->rows, c->cap, c->t->n_rows + n, err) != 0)
        return -1;
    memcpy(c->t->rows + c->t->n_rows, rows, n * sizeof *rows);
    c->t->n_rows += n;
    return 0;
}

/* Notes the FDE count and gives back the doubling's slack. */
static void collected_finish(collected *c, const agent_cfi_counts *counts) {
    agent_cfi_table *t = c->t;
    t->n_fdes = counts->fdes;
    if (t->n_rows > 0 && t->n_rows < c->cap) {
        struct agent_unwind_row *shrunk = realloc(t->rows, t->n_rows * sizeof *t->rows);
        if (shrunk != NULL)
            t->rows = shrunk;
    }
}

static int collect(const agent_cfi_source *src, size_t max_rows, agent_cfi_table *out,
                   strata_error *err) {
    collected c = {out, 0};
    agent_cfi_counts counts;
    out->rows = NULL;
    out->n_rows = out->n_fdes = 0;
    if (agent_cfi_stream(src, max_rows, collect_rows, &c, &counts, err) != 0) {
        agent_cfi_table_free(out);
        return -1;
    }
    collected_finish(&c, &counts);
    return 0;
}

void agent_cfi_table_free(agent_cfi_table *t) {
    if (t == NULL)
        return;
    free(t->rows);
    t->rows = NULL;
    t->n_rows = 0;
    t->n_fdes = 0;
}

int agent_cfi_parse_section(const uint8_t *data, size_t size, uint64_t section_vaddr,
                            bool is_debug_frame, size_t max_rows, agent_cfi_table *out,
                            strata_error *err) {
    agent_cfi_source src = {.frame = data,
                            .frame_size = size,
                            .frame_vaddr = section_vaddr,
                            .is_debug_frame = is_debug_frame};
    return collect(&src, max_rows, out, err);
}

static pthread_once_t libelf_once = PTHREAD_ONCE_INIT;
static void libelf_init(void) {
    (void)elf_version(EV_CURRENT);
}

/* The section named name with contents (not SHT_NOBITS, as in a separate debug file), or NULL. */
static Elf_Scn *find_section(Elf *elf, size_t shstrndx, const char *name, GElf_Shdr *shdr) {
    Elf_Scn *scn = NULL;
    while ((scn = elf_nextscn(elf, scn)) != NULL) {
        if (gelf_getshdr(scn, shdr) == NULL || shdr->sh_type == SHT_NOBITS)
            continue;
        const char *n = elf_strptr(elf, shstrndx, shdr->sh_name);
        if (n != NULL && strcmp(n, name) == 0)
            return scn;
    }
    return NULL;
}

int agent_cfi_stream_fd(int fd, size_t max_rows, bool use_hdr, agent_cfi_rows_fn out, void *ctx,
                        agent_cfi_counts *counts, strata_error *err) {
    counts->rows = counts->fdes = 0;
    pthread_once(&libelf_once, libelf_init);
    Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    size_t shstrndx;
    int rc = -1;
    GElf_Ehdr ehdr;
    if (elf == NULL || elf_kind(elf) != ELF_K_ELF || gelf_getehdr(elf, &ehdr) == NULL) {
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "not an ELF file");
        goto done;
    }
    if (ehdr.e_machine != EM_X86_64 || ehdr.e_ident[EI_CLASS] != ELFCLASS64 ||
        ehdr.e_ident[EI_DATA] != ELFDATA2LSB) {
        strata_error_set(err, STRATA_UNIMPLEMENTED,
                         "CFI is read for x86-64 only (ELF machine %u, class %u)",
                         (unsigned)ehdr.e_machine, (unsigned)ehdr.e_ident[EI_CLASS]);
        goto done;
    }
    if (elf_getshdrstrndx(elf, &shstrndx) != 0) {
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "ELF section names: %s", elf_errmsg(-1));
        goto done;
    }
    GElf_Shdr shdr;
    agent_cfi_source src = {0};
    Elf_Scn *scn = find_section(elf, shstrndx, ".eh_frame", &shdr);
    if (scn == NULL) {
        scn = find_section(elf, shstrndx, ".debug_frame", &shdr);
        src.is_debug_frame = true;
    }
    if (scn == NULL) {
        rc = 0; /* no CFI: an empty table */
        goto done;
    }
    const char *name = src.is_debug_frame ? ".debug_frame" : ".eh_frame";
    if ((shdr.sh_flags & SHF_COMPRESSED) != 0 && elf_compress(scn, 0, 0) < 0) {
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: cannot decompress: %s", name,
                         elf_errmsg(-1));
        goto done;
    }
    Elf_Data *data = elf_getdata(scn, NULL);
    if (data == NULL) {
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: cannot read: %s", name, elf_errmsg(-1));
        goto done;
    }
    src.frame = data->d_buf;
    src.frame_size = data->d_size;
    src.frame_vaddr = shdr.sh_addr;
    GElf_Shdr hdr_shdr;
    Elf_Scn *hdr_scn = use_hdr && !src.is_debug_frame
                           ? find_section(elf, shstrndx, ".eh_frame_hdr", &hdr_shdr)
                           : NULL;
    Elf_Data *hdr_data = hdr_scn != NULL && (hdr_shdr.sh_flags & SHF_COMPRESSED) == 0
                             ? elf_getdata(hdr_scn, NULL)
                             : NULL;
    if (hdr_data != NULL) {
        src.hdr = hdr_data->d_buf;
        src.hdr_size = hdr_data->d_size;
        src.hdr_vaddr = hdr_shdr.sh_addr;
    }
    rc = agent_cfi_stream(&src, max_rows, out, ctx, counts, err);
done:
    if (elf != NULL)
        elf_end(elf);
    return rc;
}

int agent_cfi_read_fd(int fd, size_t max_rows, agent_cfi_table *out, strata_error *err) {
    collected c = {out, 0};
    agent_cfi_counts counts;
    out->rows = NULL;
    out->n_rows = out->n_fdes = 0;
    if (agent_cfi_stream_fd(fd, max_rows, true, collect_rows, &c, &counts, err) != 0) {
        agent_cfi_table_free(out);
        return -1;
    }
    collected_finish(&c, &counts);
    return 0;
}

int agent_cfi_read_file(const char *path, size_t max_rows, agent_cfi_table *out,
                        strata_error *err) {
    out->rows = NULL;
    out->n_rows = 0;
    out->n_fdes = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return strata_error_set(err, STRATA_NOT_FOUND, "%s: %s", path, strerror(errno));
    int rc = agent_cfi_read_fd(fd, max_rows, out, err);
    close(fd);
    if (rc != 0)
        strata_error_wrap(err, "%s", path);
    return rc;
}
