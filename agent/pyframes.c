/*
 * pyframes.c - CPython processes, their code objects and Python frames. See pyframes.h.
 */
#include "pyframes.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/array.h"
#include "common/hash.h"

/* --- offsets, one table per minor version ----------------------------------------------------
 * 3.11: checked with offsetof against the 3.11.2 headers (Py_BUILD_CORE: pycore_runtime.h,
 * pycore_frame.h, cpython/pystate.h, cpython/code.h), against the DWARF of Debian's
 * python3.11 (python3.11-dbg, gdb ptype/o), and by walking a live /usr/bin/python3 through
 * /proc/PID/mem. The layouts do not change within a minor version. */
typedef struct py_layout {
    unsigned minor; /* 3.minor */
    struct agent_py_proc bpf;
    uint16_t co_firstlineno, co_filename, co_qualname, co_linetable;
    uint16_t code_header;    /* bytes read from a code object: up to co_code_adaptive */
    uint16_t unicode_length; /* PyASCIIObject.length */
    uint16_t unicode_state;  /* PyASCIIObject.state (interned:2 kind:3 compact:1 ascii:1) */
    uint16_t ascii_data;     /* sizeof(PyASCIIObject): a compact ASCII string's characters */
    uint16_t compact_data;   /* sizeof(PyCompactUnicodeObject): other compact strings' */
    uint16_t bytes_size;     /* PyVarObject.ob_size */
    uint16_t bytes_data;     /* PyBytesObject.ob_sval */
} py_layout;

static const py_layout layouts[] = {
    {.minor = 11,
     .bpf = {.tstate_current = 576,
             .native_thread_id = 160,
             .cframe = 56,
             .current_frame = 8,
             .f_code = 32,
             .previous = 48,
             .prev_instr = 56,
             .is_entry = 68,
             .code_adaptive = 184},
     .co_firstlineno = 72,
     .co_filename = 112,
     .co_qualname = 128,
     .co_linetable = 136,
     .code_header = 184,
     .unicode_length = 16,
     .unicode_state = 32,
     .ascii_data = 48,
     .compact_data = 72,
     .bytes_size = 16,
     .bytes_data = 32},
};

#define OB_TYPE 8             /* PyObject.ob_type, every version */
#define MAX_STRING_CHARS 1024 /* longer names and paths are cut */
#define MAX_LINETABLE (64u << 10)

/* --- state --------------------------------------------------------------------------------- */

typedef struct py_code {
    char *qualname; /* NULL: unreadable */
    char *filename;
    uint8_t *linetable;
    size_t linetable_len;
    int first_line;
} py_code;

typedef struct py_frame {
    uint32_t code; /* index into codes */
    int32_t line;
} py_frame;

typedef struct py_proc {
    pid_t pid;
    uint64_t start_time;
    size_t n_mappings;       /* when detection ran (re-run when the maps change) */
    uint64_t last_seen;      /* window */
    const py_layout *layout; /* NULL: not a (supported) Python process */
    bool published;
    uint64_t code_type; /* &PyCode_Type in the process */
    uint64_t eval_start, eval_end;
    strata_u64_map code_index; /* code address -> index + 1 */
    py_code *codes;
    size_t n_codes, cap_codes;
    strata_u64_map frame_index; /* (code << 32 | line) + 1 -> index + 1 */
    py_frame *frames;
    size_t n_frames, cap_frames;
} py_proc;

struct agent_python {
    agent_python_options o;
    strata_u64_map by_pid; /* pid + 1 -> index + 1 into procs */
    py_proc **procs;
    size_t n_procs, cap_procs;
    uint64_t window;
    agent_python_stats stats;
};

/* --- the pure parts ------------------------------------------------------------------------ */

static bool read_varint(const uint8_t *t, size_t len, size_t *i, unsigned *out) {
    unsigned val = 0, shift = 0;
    for (;;) {
        if (*i >= len || shift > 24)
            return false;
        uint8_t b = t[(*i)++];
        val |= (unsigned)(b & 63) << shift;
        shift += 6;
        if (!(b & 64))
            break;
    }
    *out = val;
    return true;
}

static bool read_svarint(const uint8_t *t, size_t len, size_t *i, int *out) {
    unsigned u;
    if (!read_varint(t, len, i, &u))
        return false;
    *out = (u & 1) ? -(int)(u >> 1) : (int)(u >> 1);
    return true;
}

/* Location entry codes (CPython 3.11 Objects/locations.md). */
#define LOC_NONE 15
#define LOC_LONG 14
#define LOC_NO_COLUMNS 13
#define LOC_ONE_LINE0 10

int agent_python_line(const uint8_t *table, size_t len, int first_line, int32_t offset) {
    if (offset < 0)
        return first_line;
    int line = first_line;
    int64_t end = 0;
    size_t i = 0;
    while (i < len) {
        uint8_t first = table[i];
        if (!(first & 128))
            return -1; /* not the start of an entry: a corrupt table */
        int code = (first >> 3) & 15, delta = 0;
        size_t j = i + 1;
        if ((code == LOC_LONG || code == LOC_NO_COLUMNS) && !read_svarint(table, len, &j, &delta))
            return -1;
        if (code >= LOC_ONE_LINE0 && code < LOC_NO_COLUMNS)
            delta = code - LOC_ONE_LINE0;
        line += delta;
        end += ((first & 7) + 1) * 2; /* code units of 2 bytes */
        if (offset < end)
            return code == LOC_NONE ? -1 : line;
        /* the next entry starts at the next byte with the top bit set */
        for (i++; i < len && !(table[i] & 128); i++)
            ;
    }
    return -1;
}

size_t agent_python_interleave(const uint64_t *native, size_t n_native, const uint64_t *py,
                               const bool *entry, size_t n_py, uint64_t eval_start,
                               uint64_t eval_end, uint64_t *out, size_t cap) {
    size_t n = 0, next = 0;
    for (size_t i = 0; i < n_native; i++) {
        /* return addresses point after their call: look inside it */
        uint64_t pc = i == 0 ? native[i] : native[i] - 1;
        if (pc >= eval_start && pc < eval_end)
            while (next < n_py && n < cap) {
                bool last = entry[next];
                out[n++] = py[next++];
                if (last)
                    break;
            }
        if (n < cap)
            out[n++] = native[i];
    }
    while (next < n_py && n < cap)
        out[n++] = py[next++];
    return n;
}

/* --- reading the process -------------------------------------------------------------------- */

static bool read_mem(pid_t pid, uint64_t addr, void *buf, size_t len) {
    if (addr == 0 || addr + len < addr)
        return false;
    struct iovec local = {buf, len}, remote = {(void *)(uintptr_t)addr, len};
    return process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)len;
}

static uint64_t load_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void put_utf8(char *out, size_t *n, uint32_t c) {
    if (c < 0x80) {
        out[(*n)++] = (char)c;
    } else if (c < 0x800) {
        out[(*n)++] = (char)(0xc0 | c >> 6);
        out[(*n)++] = (char)(0x80 | (c & 63));
    } else if (c < 0x10000) {
        out[(*n)++] = (char)(0xe0 | c >> 12);
        out[(*n)++] = (char)(0x80 | ((c >> 6) & 63));
        out[(*n)++] = (char)(0x80 | (c & 63));
    } else {
        out[(*n)++] = (char)(0xf0 | (c >> 18 & 7));
        out[(*n)++] = (char)(0x80 | ((c >> 12) & 63));
        out[(*n)++] = (char)(0x80 | ((c >> 6) & 63));
        out[(*n)++] = (char)(0x80 | (c & 63));
    }
}

/* A compact str object as UTF-8 (NULL on a failed read, a non-compact string or OOM). */
static char *read_unicode(pid_t pid, const py_layout *l, uint64_t addr) {
    uint8_t head[128];
    if (l->compact_data > sizeof head || !read_mem(pid, addr, head, l->compact_data))
        return NULL;
    uint64_t length = load_u64(head + l->unicode_length);
    uint32_t state;
    memcpy(&state, head + l->unicode_state, sizeof state);
    unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    if (!compact || (kind != 1 && kind != 2 && kind != 4) || (ascii && kind != 1))
        return NULL;
    if (length > MAX_STRING_CHARS)
        length = MAX_STRING_CHARS;
    uint8_t raw[MAX_STRING_CHARS * 4];
    if (length > 0 &&
        !read_mem(pid, addr + (ascii ? l->ascii_data : l->compact_data), raw, length * kind))
        return NULL;
    char *s = malloc(length * 4 + 1);
    if (s == NULL)
        return NULL;
    size_t n = 0;
    for (uint64_t i = 0; i < length; i++) {
        uint32_t c = kind == 1   ? raw[i]
                     : kind == 2 ? (uint32_t)(raw[2 * i] | raw[2 * i + 1] << 8)
                                 : (uint32_t)raw[4 * i] | raw[4 * i + 1] << 8 |
                                       raw[4 * i + 2] << 16 | (uint32_t)raw[4 * i + 3] << 24;
        if (c > 0x10ffff || (c >= 0xd800 && c < 0xe000))
            c = 0xfffd;
        put_utf8(s, &n, c);
    }
    s[n] = '\0';
    return s;
}

/* co_linetable (a bytes object), or NULL/0. */
static uint8_t *read_bytes(pid_t pid, const py_layout *l, uint64_t addr, size_t *len) {
    uint8_t head[64];
    *len = 0;
    if (l->bytes_data > sizeof head || !read_mem(pid, addr, head, l->bytes_data))
        return NULL;
    uint64_t size = load_u64(head + l->bytes_size);
    if (size == 0 || size > MAX_LINETABLE)
        return NULL;
    uint8_t *data = malloc(size);
    if (data == NULL || !read_mem(pid, addr + l->bytes_data, data, size)) {
        free(data);
        return NULL;
    }
    *len = size;
    return data;
}

/* Reads the code object at addr into c; false if it is not one (c then names nothing). */
static bool read_code(const py_proc *pp, uint64_t addr, py_code *c) {
    const py_layout *l = pp->layout;
    uint8_t head[256];
    memset(c, 0, sizeof *c);
    if (l->code_header > sizeof head || !read_mem(pp->pid, addr, head, l->code_header) ||
        load_u64(head + OB_TYPE) != pp->code_type)
        return false;
    int32_t first;
    memcpy(&first, head + l->co_firstlineno, sizeof first);
    c->first_line = first;
    c->qualname = read_unicode(pp->pid, l, load_u64(head + l->co_qualname));
    c->filename = read_unicode(pp->pid, l, load_u64(head + l->co_filename));
    c->linetable = read_bytes(pp->pid, l, load_u64(head + l->co_linetable), &c->linetable_len);
    if (c->qualname == NULL || c->filename == NULL) {
        free(c->qualname);
        free(c->filename);
        free(c->linetable);
        memset(c, 0, sizeof *c);
        return false;
    }
    return true;
}

/* --- detection ------------------------------------------------------------------------------ */

typedef struct py_symbols {
    uint64_t runtime, version, code_type, eval, eval_size; /* link-time addresses */
} py_symbols;

static void scan_symbols(Elf *elf, py_symbols *out) {
    Elf_Scn *scn = NULL;
    while ((scn = elf_nextscn(elf, scn)) != NULL) {
        GElf_Shdr sh;
        if (gelf_getshdr(scn, &sh) == NULL ||
            (sh.sh_type != SHT_DYNSYM && sh.sh_type != SHT_SYMTAB) || sh.sh_entsize == 0)
            continue;
        Elf_Data *data = elf_getdata(scn, NULL);
        size_t count = sh.sh_size / sh.sh_entsize;
        for (size_t i = 0; data != NULL && i < count; i++) {
            GElf_Sym sym;
            if (gelf_getsym(data, (int)i, &sym) == NULL || sym.st_value == 0)
                continue;
            const char *name = elf_strptr(elf, sh.sh_link, sym.st_name);
            if (name == NULL || (name[0] != '_' && name[0] != 'P'))
                continue;
            if (strcmp(name, "_PyRuntime") == 0)
                out->runtime = sym.st_value;
            else if (strcmp(name, "Py_Version") == 0)
                out->version = sym.st_value;
            else if (strcmp(name, "PyCode_Type") == 0)
                out->code_type = sym.st_value;
            else if (strcmp(name, "_PyEval_EvalFrameDefault") == 0) {
                out->eval = sym.st_value;
                out->eval_size = sym.st_size;
            }
        }
    }
}

/* The file offset of a link-time address, through its PT_LOAD segment. */
static bool vaddr_to_offset(Elf *elf, uint64_t vaddr, uint64_t *off) {
    size_t n;
    if (elf_getphdrnum(elf, &n) != 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        GElf_Phdr ph;
        if (gelf_getphdr(elf, (int)i, &ph) != NULL && ph.p_type == PT_LOAD && vaddr >= ph.p_vaddr &&
            vaddr - ph.p_vaddr < ph.p_filesz) {
            *off = vaddr - ph.p_vaddr + ph.p_offset;
            return true;
        }
    }
    return false;
}

/* The load bias of the file mapped at m: process address = link-time address + bias. */
static bool load_bias(Elf *elf, const agent_mapping *m, uint64_t *bias) {
    size_t n;
    if (elf_getphdrnum(elf, &n) != 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        GElf_Phdr ph;
        if (gelf_getphdr(elf, (int)i, &ph) != NULL && ph.p_type == PT_LOAD &&
            m->offset >= ph.p_offset && m->offset - ph.p_offset < ph.p_filesz) {
            *bias = m->start - (m->offset - ph.p_offset) - ph.p_vaddr;
            return true;
        }
    }
    return false;
}

/* Whether a mapped file's name looks like an interpreter: python3.X[...] or libpython3.X...so. */
static bool python_file_name(const char *path) {
    const char *base = strrchr(path, '/');
    base = base != NULL ? base + 1 : path;
    if (strncmp(base, "lib", 3) == 0)
        base += 3;
    return strncmp(base, "python3.", 8) == 0 || strcmp(base, "python3") == 0;
}

/* Fills pp's interpreter fields from mapping m if its file is a supported CPython. */
static bool detect_in_file(agent_python *py, py_proc *pp, const agent_mapping *m) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%d/root%s", py->o.proc_root, (int)pp->pid, m->path) >=
        (int)sizeof path)
        return false;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool found = false;
    Elf *elf = elf_begin(fd, ELF_C_READ, NULL);
    py_symbols sym = {0};
    uint64_t bias, off;
    uint64_t version = 0;
    if (elf != NULL && elf_kind(elf) == ELF_K_ELF) {
        scan_symbols(elf, &sym);
        if (sym.runtime != 0 && sym.version != 0 && sym.code_type != 0 && sym.eval != 0 &&
            vaddr_to_offset(elf, sym.version, &off) &&
            pread(fd, &version, sizeof version, (off_t)off) == (ssize_t)sizeof version &&
            load_bias(elf, m, &bias)) {
            unsigned major = (unsigned)(version >> 24) & 0xff, minor = (version >> 16) & 0xff;
            for (size_t i = 0; major == 3 && i < sizeof layouts / sizeof *layouts; i++)
                if (layouts[i].minor == minor)
                    pp->layout = &layouts[i];
            if (pp->layout == NULL)
                py->stats.unsupported++;
            pp->code_type = sym.code_type + bias;
            pp->eval_start = sym.eval + bias;
            pp->eval_end = pp->eval_start + (sym.eval_size != 0 ? sym.eval_size : 1);
            found = true;
            struct agent_py_proc info =
                pp->layout != NULL ? pp->layout->bpf : (struct agent_py_proc){0};
            info.runtime = sym.runtime + bias;
            if (pp->layout != NULL && py->o.publish != NULL) {
                if (py->o.publish(py->o.publish_ctx, (uint32_t)pp->pid, &info) == 0) {
                    pp->published = true;
                    py->stats.processes++;
                } else {
                    py->stats.publish_errors++;
                }
            }
        }
    }
    if (elf != NULL)
        elf_end(elf);
    close(fd);
    return found;
}

static void unpublish(agent_python *py, py_proc *pp) {
    if (pp->published && py->o.publish != NULL)
        (void)py->o.publish(py->o.publish_ctx, (uint32_t)pp->pid, NULL);
    pp->published = false;
}

static void detect(agent_python *py, py_proc *pp, const agent_proc *proc) {
    unpublish(py, pp);
    pp->layout = NULL;
    pp->n_mappings = proc->n_mappings;
    for (size_t i = 0; i < proc->n_mappings; i++) {
        const agent_mapping *m = &proc->mappings[i];
        if (m->path != NULL && m->path[0] == '/' && python_file_name(m->path) &&
            detect_in_file(py, pp, m))
            return;
    }
}

/* --- processes ------------------------------------------------------------------------------ */

static void clear_window(py_proc *pp) {
    for (size_t i = 0; i < pp->n_codes; i++) {
        free(pp->codes[i].qualname);
        free(pp->codes[i].filename);
        free(pp->codes[i].linetable);
    }
    pp->n_codes = 0;
    pp->n_frames = 0;
    strata_u64_map_clear(&pp->code_index);
    strata_u64_map_clear(&pp->frame_index);
}

static void proc_free(py_proc *pp) {
    clear_window(pp);
    free(pp->codes);
    free(pp->frames);
    strata_u64_map_free(&pp->code_index);
    strata_u64_map_free(&pp->frame_index);
    free(pp);
}

static py_proc *find_proc(const agent_python *py, pid_t pid) {
    uint64_t *index = strata_u64_map_get(&py->by_pid, (uint64_t)pid + 1);
    return index != NULL ? py->procs[*index - 1] : NULL;
}

static py_proc *new_proc(agent_python *py, pid_t pid) {
    if (STRATA_ARRAY_RESERVE(py->procs, py->cap_procs, py->n_procs + 1) != 0)
        return NULL;
    py_proc *pp = calloc(1, sizeof *pp);
    if (pp == NULL)
        return NULL;
    if (strata_u64_map_init(&pp->code_index, 16) != 0 ||
        strata_u64_map_init(&pp->frame_index, 16) != 0 ||
        strata_u64_map_upsert(&py->by_pid, (uint64_t)pid + 1, py->n_procs + 1, NULL) == NULL) {
        proc_free(pp);
        return NULL;
    }
    pp->pid = pid;
    py->procs[py->n_procs++] = pp;
    return pp;
}

/* The state of proc, (re)detected on first sight, pid reuse and changed mappings. */
static py_proc *proc_for(agent_python *py, const agent_proc *proc) {
    py_proc *pp = find_proc(py, proc->pid);
    bool fresh = pp == NULL;
    if (fresh && (pp = new_proc(py, proc->pid)) == NULL)
        return NULL;
    if (fresh || pp->start_time != proc->start_time || pp->n_mappings != proc->n_mappings) {
        if (!fresh && pp->start_time != proc->start_time)
            clear_window(pp);
        pp->start_time = proc->start_time;
        detect(py, pp, proc);
    }
    pp->last_seen = py->window;
    return pp;
}

/* The index of code object addr in pp->codes, read on first use; false on OOM. */
static bool code_for(agent_python *py, py_proc *pp, uint64_t addr, uint32_t *index) {
    uint64_t *known = strata_u64_map_get(&pp->code_index, addr != 0 ? addr : 1);
    if (known != NULL)
        return (*index = (uint32_t)(*known - 1)), true;
    if (pp->n_codes >= UINT32_MAX - 1 ||
        STRATA_ARRAY_RESERVE(pp->codes, pp->cap_codes, pp->n_codes + 1) != 0)
        return false;
    py_code *c = &pp->codes[pp->n_codes];
    if (!read_code(pp, addr, c))
        py->stats.code_failures++;
    if (strata_u64_map_upsert(&pp->code_index, addr != 0 ? addr : 1, pp->n_codes + 1, NULL) ==
        NULL) {
        free(c->qualname);
        free(c->filename);
        free(c->linetable);
        return false;
    }
    *index = (uint32_t)pp->n_codes++;
    return true;
}

/* The frame word of (code, offset); false on OOM. */
static bool frame_word(agent_python *py, py_proc *pp, const struct agent_py_frame *f,
                       uint64_t *word) {
    uint32_t code;
    if (!code_for(py, pp, f->code, &code))
        return false;
    const py_code *c = &pp->codes[code];
    int line = c->qualname != NULL ? agent_python_line(c->linetable, c->linetable_len,
                                                       c->first_line, f->instr_offset)
                                   : 0;
    uint64_t key = ((uint64_t)code << 32 | (uint32_t)line) + 1;
    uint64_t *known = strata_u64_map_get(&pp->frame_index, key);
    if (known != NULL)
        return (*word = AGENT_PY_WORD_TAG | (*known - 1)), true;
    if (STRATA_ARRAY_RESERVE(pp->frames, pp->cap_frames, pp->n_frames + 1) != 0 ||
        strata_u64_map_upsert(&pp->frame_index, key, pp->n_frames + 1, NULL) == NULL)
        return false;
    pp->frames[pp->n_frames] = (py_frame){code, line};
    *word = AGENT_PY_WORD_TAG | pp->n_frames++;
    return true;
}

bool agent_python_merge(void *ctx, const agent_proc *proc, const struct agent_sample *s,
                        uint64_t *u, size_t *n, size_t cap) {
    agent_python *py = ctx;
    py_proc *pp = proc_for(py, proc);
    if (pp == NULL || pp->layout == NULL)
        return false;
    if (s->py_flags & AGENT_PY_NO_GIL)
        py->stats.no_gil++;
    if (s->py_flags & AGENT_PY_READ_ERROR)
        py->stats.read_errors++;
    size_t np = s->py_n < AGENT_PY_MAX_FRAMES ? s->py_n : AGENT_PY_MAX_FRAMES;
    if (np == 0)
        return false;
    uint64_t words[AGENT_PY_MAX_FRAMES];
    bool entry[AGENT_PY_MAX_FRAMES];
    for (size_t i = 0; i < np; i++) {
        if (!frame_word(py, pp, &s->py[i], &words[i]))
            return false; /* out of memory: the native frames stay */
        entry[i] = (s->py[i].flags & AGENT_PY_FRAME_ENTRY) != 0;
    }
    uint64_t out[AGENT_MAX_FRAMES + 1 + AGENT_PY_MAX_FRAMES];
    size_t m =
        agent_python_interleave(u, *n, words, entry, np, pp->eval_start, pp->eval_end, out,
                                cap < sizeof out / sizeof *out ? cap : sizeof out / sizeof *out);
    memcpy(u, out, m * sizeof *out);
    *n = m;
    py->stats.samples++;
    return true;
}

bool agent_python_frame_info(const agent_python *py, pid_t pid, uint64_t word,
                             agent_py_frame_info *out) {
    const py_proc *pp = py != NULL ? find_proc(py, pid) : NULL;
    uint64_t index = word & ~AGENT_PY_WORD_TAG;
    if (pp == NULL || !agent_python_is_frame(word) || index >= pp->n_frames)
        return false;
    const py_frame *f = &pp->frames[index];
    const py_code *c = &pp->codes[f->code];
    out->qualname = c->qualname != NULL ? c->qualname : "<unknown>";
    out->filename = c->filename != NULL ? c->filename : "";
    out->line = f->line > 0 ? f->line : 0;
    out->first_line = c->qualname != NULL && c->first_line > 0 ? c->first_line : 0;
    return true;
}

/* --- lifetime ------------------------------------------------------------------------------- */

agent_python *agent_python_new(const agent_python_options *options, strata_error *err) {
    if (elf_version(EV_CURRENT) == EV_NONE) {
        strata_error_set(err, STRATA_INTERNAL, "libelf: %s", elf_errmsg(-1));
        return NULL;
    }
    agent_python *py = calloc(1, sizeof *py);
    if (py == NULL || strata_u64_map_init(&py->by_pid, 64) != 0) {
        free(py);
        strata_error_oom(err);
        return NULL;
    }
    if (options != NULL)
        py->o = *options;
    if (py->o.proc_root == NULL)
        py->o.proc_root = "/proc";
    return py;
}

void agent_python_end_window(agent_python *py) {
    size_t kept = 0;
    strata_u64_map_clear(&py->by_pid);
    for (size_t i = 0; i < py->n_procs; i++) {
        py_proc *pp = py->procs[i];
        if (pp->last_seen != py->window) {
            unpublish(py, pp);
            proc_free(pp);
            continue;
        }
        clear_window(pp);
        py->procs[kept++] = pp;
        /* re-inserting into a just-cleared map of the same capacity cannot fail */
        (void)strata_u64_map_upsert(&py->by_pid, (uint64_t)pp->pid + 1, kept, NULL);
    }
    py->n_procs = kept;
    py->window++;
}

void agent_python_stats_get(const agent_python *py, agent_python_stats *out) {
    *out = py->stats;
}

void agent_python_free(agent_python *py) {
    if (py == NULL)
        return;
    for (size_t i = 0; i < py->n_procs; i++)
        proc_free(py->procs[i]);
    free(py->procs);
    strata_u64_map_free(&py->by_pid);
    free(py);
}
