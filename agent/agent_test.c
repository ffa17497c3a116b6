/*
 * agent_test.c - unit tests of the agent's user space that need no BPF: /proc parsers, container
 * ids, kallsyms, ELF symbolization of this very binary (PIE + ASLR), gopclntab (synthetic and
 * corrupt tables), aggregation, pprof building, labels, WriteRaw encoding and the push queue's
 * bound. The BPF side is covered by tests/integration/test_agent.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aggregate.h"
#include "agent_cli.h"
#include "common/clock.h"
#include "demangle.h"
#include "elfsym.h"
#include "gopclntab.h"
#include "ksyms.h"
#include "pprof/pprof.h"
#include "procinfo.h"
#include "proclabels.h"
#include "profile_build.h"
#include "push/push.h"
#include "relabel/relabel.h"
#include "sampler.h"
#include "symcache.h"

#define ID64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

/* A function with a known name to find in our own symbol table. */
__attribute__((noinline)) int agent_test_known_function(int x);
__attribute__((noinline)) int agent_test_known_function(int x) {
    return x * 3 + 1;
}

static void expect_container(const char *cgroup, const char *id, const char *path) {
    char out[AGENT_CONTAINER_ID_LEN + 1], cg[512];
    bool found = agent_container_id_from_cgroup(cgroup, out, cg, sizeof cg);
    assert_int_equal(found, id[0] != '\0');
    assert_string_equal(out, id);
    if (path != NULL)
        assert_string_equal(cg, path);
}

static void test_container_ids(void **state) {
    (void)state;
    expect_container("0::/system.slice/docker-" ID64 ".scope\n", ID64,
                     "/system.slice/docker-" ID64 ".scope");
    expect_container("12:memory:/docker/" ID64 "\n0::/\n", ID64, "/docker/" ID64);
    expect_container("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_5678."
                     "slice/cri-containerd-" ID64 ".scope\n",
                     ID64, NULL);
    expect_container("0::/kubepods/burstable/pod0f1e2d3c-aaaa-bbbb-cccc-000000000000/" ID64 "\n",
                     ID64, NULL);
    expect_container("0::/machine.slice/crio-" ID64 ".scope", ID64, NULL);
    expect_container("0::/machine.slice/libpod-" ID64 ".scope", ID64, NULL);
    /* Not containers: the monitor, a 32-hex id (this VM's memory cgroup), upper case, root. */
    expect_container("0::/machine.slice/crio-conmon-" ID64 ".scope\n", "", NULL);
    expect_container("9:name=systemd:/\n4:memory:/process_api/6a6a9d9b7ddb15d3cd40f1dddddc4507\n"
                     "0::/\n",
                     "", "/process_api/6a6a9d9b7ddb15d3cd40f1dddddc4507");
    expect_container("0::/docker/0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
                     "", NULL);
    expect_container("0::/\n", "", "");
    expect_container("", "", "");
    expect_container("garbage without colons\n::\n", "", NULL);
}

static void test_maps_and_stat_parsing(void **state) {
    (void)state;
    agent_mapping m;
    bool exec;
    assert_int_equal(agent_parse_maps_line("56176518e000-561765194000 r-xp 00002000 fe:00 247498   "
                                           "                  /usr/bin/head\n",
                                           &m, &exec, NULL),
                     0);
    assert_true(exec);
    assert_int_equal(m.start, 0x56176518e000);
    assert_int_equal(m.end, 0x561765194000);
    assert_int_equal(m.offset, 0x2000);
    assert_int_equal(m.dev_major, 0xfe);
    assert_int_equal(m.inode, 247498);
    assert_string_equal(m.path, "/usr/bin/head");
    free(m.path);
    assert_int_equal(
        agent_parse_maps_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0\n", &m, &exec, NULL), 0);
    assert_false(exec);
    assert_null(m.path);
    strata_error err;
    assert_int_equal(agent_parse_maps_line("zzz\n", &m, &exec, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(agent_parse_maps_line("2000-1000 r-xp 0 00:00 0 /x\n", &m, &exec, &err), -1);

    char comm[16];
    uint64_t start;
    assert_int_equal(
        agent_parse_stat("27108 (a (b) c) R 27104 27104 174747 0 -1 4194304 91 0 0 0 0 "
                         "0 0 0 20 0 1 0 987654 5423104 177",
                         comm, &start, NULL),
        0);
    assert_string_equal(comm, "a (b) c");
    assert_int_equal(start, 987654);
    assert_int_equal(agent_parse_stat("1 (x) R 1 2", comm, &start, &err), -1);
    assert_int_equal(agent_parse_stat("no parens", comm, &start, &err), -1);
}

static void test_cpu_list_and_durations(void **state) {
    (void)state;
    uint8_t bitmap[16];
    assert_int_equal(agent_parse_cpu_list("0-3,8,10-11\n", bitmap, 128, NULL), 7);
    assert_int_equal(bitmap[0], 0x0f);
    assert_int_equal(bitmap[1], 0x0d);
    assert_int_equal(agent_parse_cpu_list("0", bitmap, 128, NULL), 1);
    strata_error err;
    assert_int_equal(agent_parse_cpu_list("3-1", bitmap, 128, &err), -1);
    assert_int_equal(agent_parse_cpu_list("a", bitmap, 128, &err), -1);
    assert_int_equal(agent_parse_cpu_list("", bitmap, 128, &err), -1);
    int64_t ns;
    assert_int_equal(agent_parse_duration("10s", &ns, NULL), 0);
    assert_int_equal(ns, 10 * STRATA_NS_PER_SEC);
    assert_int_equal(agent_parse_duration("1m30s", &ns, NULL), 0);
    assert_int_equal(ns, 90 * STRATA_NS_PER_SEC);
    assert_int_equal(agent_parse_duration("250ms", &ns, NULL), 0);
    assert_int_equal(ns, 250 * STRATA_NS_PER_MS);
    assert_int_equal(agent_parse_duration("1.5s", &ns, NULL), 0);
    assert_int_equal(ns, 1500 * STRATA_NS_PER_MS);
    assert_int_equal(agent_parse_duration("10", &ns, &err), -1);
    assert_int_equal(agent_parse_duration("-1s", &ns, &err), -1);
    assert_int_equal(agent_parse_duration("", &ns, &err), -1);
    assert_int_equal(agent_parse_duration("5parsecs", &ns, &err), -1);
}

static const char kallsyms_fixture[] = "ffffffff81000000 T _stext\n"
                                       "ffffffff81000100 t helper_one\n"
                                       "ffffffff81000200 T do_syscall_64\n"
                                       "ffffffff81000300 D some_data\n"
                                       "ffffffff81000400 W weak_fn\n"
                                       "0000000000000000 T hidden\n"
                                       "ffffffffc0000000 t mod_fn\t[some_module]\n"
                                       "short\n";

static void test_ksyms(void **state) {
    (void)state;
    agent_ksyms k;
    assert_int_equal(agent_ksyms_parse(kallsyms_fixture, strlen(kallsyms_fixture), &k, NULL), 0);
    assert_int_equal(k.count, 5); /* text symbols with real addresses */
    assert_string_equal(agent_ksyms_lookup(&k, 0xffffffff81000105), "helper_one");
    assert_string_equal(agent_ksyms_lookup(&k, 0xffffffff81000200), "do_syscall_64");
    assert_string_equal(agent_ksyms_lookup(&k, 0xffffffff81000350), "do_syscall_64");
    assert_string_equal(agent_ksyms_lookup(&k, 0xffffffff81000401), "weak_fn");
    assert_string_equal(agent_ksyms_lookup(&k, 0xffffffffc0000010), "mod_fn");
    assert_null(agent_ksyms_lookup(&k, 0x1000));
    assert_null(agent_ksyms_lookup(&k, 0xffffffffc8000000)); /* far past the last symbol */
    agent_ksyms_free(&k);
    /* Function padding: "__pfx_NAME" folds into NAME, which starts at its padding. */
    static const char padded[] = "ffffffff81000000 T _stext\n"
                                 "ffffffff810000f0 t __pfx_helper_one\n"
                                 "ffffffff81000100 t helper_one\n"
                                 "ffffffff810001f0 T __pfx_other\n"
                                 "ffffffff81000200 T do_syscall_64\n";
    assert_int_equal(agent_ksyms_parse(padded, strlen(padded), &k, NULL), 0);
    assert_int_equal(k.count, 3);
    assert_string_equal(agent_ksyms_lookup(&k, 0xffffffff810000e0), "_stext");
    assert_string_equal(agent_ksyms_lookup(&k, 0xffffffff810000f4), "helper_one");
    assert_string_equal(agent_ksyms_lookup(&k, 0xffffffff810001f4), "helper_one");
    assert_string_equal(agent_ksyms_lookup(&k, 0xffffffff81000204), "do_syscall_64");
    agent_ksyms_free(&k);
    agent_ksyms empty;
    assert_int_equal(agent_ksyms_parse("", 0, &empty, NULL), 0);
    assert_null(agent_ksyms_lookup(&empty, 0xffffffff81000000));
    agent_ksyms_free(&empty);
}

/* Symbolizes our own function through /proc/self/maps, exactly as the agent does for others. */
static void test_elf_symbolizes_self_with_aslr(void **state) {
    (void)state;
    agent_proc p;
    assert_int_equal(agent_proc_read("/proc", getpid(), &p, NULL), 0);
    assert_true(p.n_mappings > 0);
    uint64_t addr = (uint64_t)(uintptr_t)&agent_test_known_function + 2;
    const agent_mapping *m = agent_proc_find_mapping(&p, addr);
    assert_non_null(m);
    agent_elf e;
    assert_int_equal(agent_elf_load("/proc/self/exe", NULL, &e, NULL), 0);
    assert_int_equal(e.source, AGENT_SYMBOLS_SYMTAB);
    assert_true(strlen(e.build_id) >= 16);
    uint64_t vaddr, start;
    assert_true(agent_elf_offset_to_vaddr(&e, addr - m->start + m->offset, &vaddr));
    assert_string_equal(agent_elf_lookup(&e, vaddr, &start), "agent_test_known_function");
    assert_int_equal(vaddr - start, 2);
    /* The table is sorted in place, one symbol per address; names are read only when looked
     * up, and kept: the arena holds exactly the one name read so far. */
    assert_true(e.n_symbols > 100);
    for (size_t i = 1; i < e.n_symbols; i++)
        assert_true(e.symbols[i - 1].addr < e.symbols[i].addr);
    assert_int_equal(e.names_len, strlen("agent_test_known_function") + 1);
    size_t names_len = e.names_len;
    for (size_t i = 0; i < e.n_symbols; i++) {
        const char *name = agent_elf_lookup(&e, e.symbols[i].addr, NULL);
        if (name == NULL && i + 1 == e.n_symbols && e.symbols[i].size == 0)
            continue; /* an unsized last symbol claims nothing */
        if (name == NULL)
            fail_msg("symbol %zu of %zu (addr %llx size %u name %x): no name", i, e.n_symbols,
                     (unsigned long long)e.symbols[i].addr, e.symbols[i].size, e.symbols[i].name);
        assert_true(name[0] != '\0');
        if (strcmp(name, "agent_test_known_function") != 0)
            names_len += strlen(name) + 1;
    }
    assert_int_equal(e.names_len, names_len); /* each name read once, no alias's name */
    assert_string_equal(agent_elf_lookup(&e, vaddr, NULL), "agent_test_known_function");
    assert_int_equal(e.names_len, names_len); /* read before: not read again */
    agent_elf_free(&e);

    /* libc's .dynsym has aliases (getpid and __getpid at one address): one name is kept. */
    uint64_t libc_addr = (uint64_t)(uintptr_t)&getpid;
    const agent_mapping *lm = agent_proc_find_mapping(&p, libc_addr);
    assert_non_null(lm);
    assert_int_equal(agent_elf_load(lm->path, NULL, &e, NULL), 0);
    assert_int_equal(e.names_len, 0);
    assert_true(agent_elf_offset_to_vaddr(&e, libc_addr - lm->start + lm->offset, &vaddr));
    assert_non_null(strstr(agent_elf_lookup(&e, vaddr, &start), "getpid"));
    agent_elf_free(&e);
    assert_int_equal(agent_elf_load("/proc/self/exe", NULL, &e, NULL), 0);
    char id[AGENT_BUILD_ID_HEX_MAX + 1];
    assert_int_equal(agent_elf_read_build_id("/proc/self/exe", id, NULL), 0);
    assert_string_equal(id, e.build_id);
    agent_elf_free(&e);

    /* The symcache loads it once and shares it across identities with the same build id. */
    agent_symcache *c = agent_symcache_new(NULL, NULL);
    assert_non_null(c);
    agent_elf *cached = agent_symcache_get(c, &p, m);
    assert_non_null(cached);
    assert_ptr_equal(agent_symcache_get(c, &p, m), cached);
    agent_symcache_stats st;
    agent_symcache_stats_get(c, &st);
    assert_int_equal(st.loads, 1);
    agent_symcache_end_window(c);
    agent_symcache_free(c);
    agent_proc_free(&p);

    strata_error err;
    assert_int_equal(agent_elf_load("/nonexistent/file", NULL, &e, &err), -1);
    assert_int_equal(err.code, STRATA_NOT_FOUND);
    assert_int_equal(agent_elf_load("/proc/self/status", NULL, &e, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
}

static void copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    assert_int_equal(fclose(in), 0);
    assert_int_equal(fclose(out), 0);
}

/* Names read from a file stay readable when it cannot be opened any more; a name not read yet
 * is then unknown, and so it is when the path now holds another file (replaced on disk: its
 * string table is not the one indexed). */
static void test_elf_names_read_from_the_file(void **state) {
    (void)state;
    char dir[] = "/tmp/strata-elf-names-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char copy[256], moved[256];
    snprintf(copy, sizeof copy, "%s/exe", dir);
    snprintf(moved, sizeof moved, "%s/moved", dir);
    copy_file("/proc/self/exe", copy); /* in process: under valgrind, the test's binary */
    agent_elf e;
    assert_int_equal(agent_elf_load(copy, NULL, &e, NULL), 0);
    assert_true(e.n_symbols > 10);
    const char *first = agent_elf_lookup(&e, e.symbols[0].addr, NULL);
    assert_non_null(first);
    char want[256];
    snprintf(want, sizeof want, "%s", first);
    assert_true(agent_elf_names_file_open(&e));
    size_t bytes = agent_elf_bytes(&e);

    /* the file moved away: the name read stays, the others cannot be read */
    agent_elf_close_names_file(&e);
    assert_int_equal(rename(copy, moved), 0);
    assert_string_equal(agent_elf_lookup(&e, e.symbols[0].addr, NULL), want);
    assert_null(agent_elf_lookup(&e, e.symbols[1].addr, NULL));
    assert_false(agent_elf_names_file_open(&e));
    /* another file at the path: refused */
    copy_file("/bin/true", copy);
    assert_null(agent_elf_lookup(&e, e.symbols[1].addr, NULL));
    /* the same file under another path (another process's view of it): read again */
    assert_true(agent_elf_set_names_path(&e, moved));
    const char *second = agent_elf_lookup(&e, e.symbols[1].addr, NULL);
    assert_non_null(second);
    assert_true(agent_elf_bytes(&e) > bytes);
    assert_string_equal(agent_elf_lookup(&e, e.symbols[0].addr, NULL), want);
    agent_elf_free(&e);
    assert_int_equal(unlink(copy), 0);
    assert_int_equal(unlink(moved), 0);
    assert_int_equal(rmdir(dir), 0);
}

/* The symbol cache holds its budget at every load, not only between windows: with room for
 * about one table, each new file's table evicts the least recently looked-up others, the table
 * just returned stays usable, the files every process maps (looked up most recently) survive, and
 * an evicted file reloads on its next use. */
static void test_symcache_holds_budget_within_a_window(void **state) {
    (void)state;
    agent_proc p;
    assert_int_equal(agent_proc_read("/proc", getpid(), &p, NULL), 0);
    const agent_mapping *files[4];
    size_t n = 0;
    for (size_t i = 0; i < p.n_mappings && n < 4; i++) {
        const agent_mapping *m = &p.mappings[i];
        bool seen = false;
        for (size_t k = 0; k < n; k++)
            seen |= files[k]->inode == m->inode;
        if (m->path != NULL && m->path[0] == '/' && m->inode != 0 && !seen &&
            strstr(m->path, ".so") != NULL)
            files[n++] = m;
    }
    assert_true(n >= 3); /* libc, the loader, cmocka at least */
    agent_symcache *c = agent_symcache_new(&(agent_symcache_options){.max_bytes = 1}, NULL);
    assert_non_null(c);
    agent_symcache_stats st;
    size_t largest = 0;
    for (size_t k = 0; k < n; k++) {
        agent_elf *e = agent_symcache_get(c, &p, files[k]);
        assert_non_null(e);
        assert_true(e->n_symbols > 0);
        agent_symcache_stats_get(c, &st);
        assert_int_equal(st.bytes, agent_elf_bytes(e)); /* only the table just returned */
        assert_non_null(agent_elf_lookup(e, e->symbols[0].addr, NULL)); /* still usable */
        largest = agent_elf_bytes(e) > largest ? agent_elf_bytes(e) : largest;
    }
    assert_int_equal(st.loads, n);
    assert_int_equal(st.evictions, n - 1);
    /* within the window, the first file again: evicted, so read again */
    assert_non_null(agent_symcache_get(c, &p, files[0]));
    agent_symcache_stats_get(c, &st);
    assert_int_equal(st.loads, n + 1);
    assert_true(st.peak_bytes <= 2 * largest); /* never more than two tables at once */
    agent_symcache_free(c);

    /* room for all but one: the least recently looked-up file goes, not the others */
    c = agent_symcache_new(NULL, NULL);
    size_t sizes = 0;
    for (size_t k = 0; k < n; k++)
        sizes += agent_elf_bytes(agent_symcache_get(c, &p, files[k]));
    agent_symcache_free(c);
    c = agent_symcache_new(&(agent_symcache_options){.max_bytes = sizes - 1}, NULL);
    for (size_t k = 0; k < n - 1; k++)
        assert_non_null(agent_symcache_get(c, &p, files[k]));
    assert_non_null(agent_symcache_get(c, &p, files[0])); /* files[1] is now the oldest */
    assert_non_null(agent_symcache_get(c, &p, files[n - 1]));
    agent_symcache_stats_get(c, &st);
    assert_int_equal(st.evictions, 1);
    assert_int_equal(st.loads, n);
    assert_non_null(agent_symcache_get(c, &p, files[0])); /* kept: no load */
    agent_symcache_stats_get(c, &st);
    assert_int_equal(st.loads, n);
    assert_non_null(agent_symcache_get(c, &p, files[1])); /* evicted: loaded again */
    agent_symcache_stats_get(c, &st);
    assert_int_equal(st.loads, n + 1);
    agent_symcache_free(c);
    agent_proc_free(&p);
}

/* A table reads its names through the /proc/PID/root of the process that loaded it; when that
 * process has gone, the next process mapping the same build gives the path (a fake proc root:
 * <dir>/PID/root links to /). */
static void test_symcache_names_follow_a_live_process(void **state) {
    (void)state;
    char dir[] = "/tmp/strata-symcache-proc-XXXXXX", link111[256], link222[256], d111[128],
         d222[128];
    assert_non_null(mkdtemp(dir));
    snprintf(d111, sizeof d111, "%s/111", dir);
    snprintf(d222, sizeof d222, "%s/222", dir);
    snprintf(link111, sizeof link111, "%s/root", d111);
    snprintf(link222, sizeof link222, "%s/root", d222);
    assert_int_equal(mkdir(d111, 0700), 0);
    assert_int_equal(mkdir(d222, 0700), 0);
    assert_int_equal(symlink("/", link111), 0);
    assert_int_equal(symlink("/", link222), 0);
    agent_proc p;
    assert_int_equal(agent_proc_read("/proc", getpid(), &p, NULL), 0);
    /* the test's own binary: its names are in its own .symtab (not in a debug file) */
    uint64_t addr = (uint64_t)(uintptr_t)&agent_test_known_function;
    const agent_mapping *lm = agent_proc_find_mapping(&p, addr);
    assert_non_null(lm);
    agent_symcache *c = agent_symcache_new(&(agent_symcache_options){.proc_root = dir}, NULL);
    p.pid = 111;
    agent_elf *e = agent_symcache_get(c, &p, lm);
    assert_non_null(e);
    assert_int_equal(e->source, AGENT_SYMBOLS_SYMTAB);
    assert_true(e->n_symbols > 10);
    assert_non_null(agent_elf_lookup(e, e->symbols[0].addr, NULL));
    agent_symcache_end_window(c); /* closes the names file */
    assert_int_equal(unlink(link111), 0);
    assert_int_equal(rmdir(d111), 0); /* process 111 has gone */
    p.pid = 222;
    e = agent_symcache_get(c, &p, lm);
    assert_non_null(e);
    const char *name = agent_elf_lookup(e, e->symbols[1].addr, NULL);
    assert_non_null(name); /* read through 222's view */
    assert_true(name[0] != '\0');
    agent_symcache_stats st;
    agent_symcache_stats_get(c, &st);
    assert_int_equal(st.loads, 1); /* the table itself was not read again */
    agent_symcache_free(c);
    agent_proc_free(&p);
    assert_int_equal(unlink(link222), 0);
    assert_int_equal(rmdir(d222), 0);
    assert_int_equal(rmdir(dir), 0);
}

typedef struct go_funcs {
    uint64_t entries[8];
    char names[8][32];
    size_t n;
} go_funcs;

static int collect_go(void *ctx, uint64_t entry, const char *name, size_t len) {
    go_funcs *g = ctx;
    if (g->n == 8)
        return -1;
    g->entries[g->n] = entry;
    snprintf(g->names[g->n], sizeof g->names[0], "%.*s", (int)len, name);
    g->n++;
    return 0;
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A Go 1.18-layout table with two functions. */
static size_t make_pclntab_118(uint8_t *t, uint64_t text_start) {
    memset(t, 0, 256);
    put32(t, 0xfffffff0u);
    t[6] = 1;        /* minLC */
    t[7] = 8;        /* ptrsize */
    put64(t + 8, 2); /* nfunc */
    put64(t + 8 + 16, text_start);
    put64(t + 8 + 24, 120); /* funcnametab */
    put64(t + 8 + 56, 160); /* pcln (functab) */
    memcpy(t + 120, "main.main\0main.hot\0", 19);
    put32(t + 160, 0x100); /* entryoff */
    put32(t + 164, 32);    /* funcoff */
    put32(t + 168, 0x200);
    put32(t + 172, 40);
    put32(t + 160 + 32, 0x100); /* _func: entryoff, nameoff */
    put32(t + 160 + 36, 0);
    put32(t + 160 + 40, 0x200);
    put32(t + 160 + 44, 10);
    return 208;
}

static void test_gopclntab(void **state) {
    (void)state;
    uint8_t t[256];
    size_t len = make_pclntab_118(t, 0x401000);
    go_funcs g = {0};
    assert_int_equal(agent_gopclntab_parse(t, len, 0, collect_go, &g, NULL), 0);
    assert_int_equal(g.n, 2);
    assert_int_equal(g.entries[0], 0x401100);
    assert_string_equal(g.names[0], "main.main");
    assert_int_equal(g.entries[1], 0x401200);
    assert_string_equal(g.names[1], "main.hot");
    /* PIE: textStart left to a relocation reads 0; the .text address is used instead. */
    make_pclntab_118(t, 0);
    memset(&g, 0, sizeof g);
    assert_int_equal(agent_gopclntab_parse(t, len, 0x7000, collect_go, &g, NULL), 0);
    assert_int_equal(g.entries[0], 0x7100);
    /* Corrupt tables fail cleanly. */
    strata_error err;
    make_pclntab_118(t, 0x401000);
    put32(t + 172, 5000); /* funcoff out of range */
    assert_int_equal(agent_gopclntab_parse(t, len, 0, collect_go, &g, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    make_pclntab_118(t, 0x401000);
    memset(t + 120, 'x', 40); /* names lose their terminators */
    assert_int_equal(agent_gopclntab_parse(t, 160, 0, collect_go, &g, &err), -1);
    make_pclntab_118(t, 0x401000);
    put64(t + 8, UINT64_MAX); /* absurd nfunc */
    assert_int_equal(agent_gopclntab_parse(t, len, 0, collect_go, &g, &err), -1);
    put32(t, 0x12345678u);
    assert_int_equal(agent_gopclntab_parse(t, len, 0, collect_go, &g, &err), -1);
    assert_int_equal(agent_gopclntab_parse(t, 8, 0, collect_go, &g, &err), -1);
}

static struct agent_sample *make_sample(pid_t pid, uint64_t user_pc, size_t n_kernel) {
    struct agent_sample *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->pid = (__u32)pid;
    s->tid = (__u32)pid;
    strcpy(s->comm, "agent_test");
    s->ustack[0] = user_pc;
    s->ustack_bytes = 8;
    for (size_t i = 0; i < n_kernel; i++)
        s->kstack[i] = 0xffffffff81000105 + i * 0x100;
    s->kstack_bytes = (__s32)(n_kernel * 8);
    return s;
}

/* Aggregates samples of this process, builds the pprof and decodes it back. */
static void test_aggregate_and_build_profile(void **state) {
    (void)state;
    agent_aggregator a;
    assert_int_equal(agent_aggregator_init(&a, NULL, 0, NULL), 0);
    uint64_t pc = (uint64_t)(uintptr_t)&agent_test_known_function + 1;
    struct agent_sample *user = make_sample(getpid(), pc, 0);
    struct agent_sample *kern = make_sample(getpid(), pc, 2);
    struct agent_sample *unknown = make_sample(getpid(), 0x10, 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(agent_aggregator_add(&a, user, NULL), 0);
    assert_int_equal(agent_aggregator_add(&a, kern, NULL), 0);
    assert_int_equal(agent_aggregator_add(&a, unknown, NULL), 0);
    assert_int_equal(a.n_procs, 1);
    agent_process *p = a.procs[0];
    assert_int_equal(p->samples, 5);
    assert_int_equal(p->n_stacks, 3);
    assert_true(p->have_proc);

    agent_ksyms k;
    assert_int_equal(agent_ksyms_parse(kallsyms_fixture, strlen(kallsyms_fixture), &k, NULL), 0);
    agent_symcache *c = agent_symcache_new(NULL, NULL);
    agent_profile_context ctx = {
        &k,   c,   1000 * STRATA_NS_PER_SEC, 10 * STRATA_NS_PER_SEC, STRATA_NS_PER_SEC / 19, false,
        NULL, NULL};
    strata_buffer out = STRATA_BUFFER_INIT;
    agent_profile_stats st;
    assert_int_equal(agent_profile_build(&a, p, &ctx, &out, &st, NULL), 0);
    assert_true(pprof_is_gzip(out.data, out.len));
    assert_int_equal(st.user_misses, 1); /* 0x10 is in no mapping */
    assert_int_equal(st.kernel_misses, 0);

    pprof_profile prof;
    assert_int_equal(pprof_decode(out.data, out.len, NULL, &prof, NULL), 0);
    assert_int_equal(prof.n_samples, 3);
    assert_int_equal(prof.period, 52631578);
    assert_int_equal(prof.duration_nanos, 10 * STRATA_NS_PER_SEC);
    pprof_string t = pprof_string_at(&prof, prof.period_type.type);
    assert_memory_equal(t.ptr, "cpu", 3);
    int64_t total = 0;
    bool saw_kernel = false, saw_user = false, saw_unknown = false;
    for (size_t i = 0; i < prof.n_samples; i++) {
        total += pprof_sample_value(&prof, i, 0);
        const pprof_sample *s = &prof.samples[i];
        const pprof_location *leaf =
            pprof_find_location(&prof, prof.sample_location_ids[s->location_offset]);
        if (leaf->line_count == 0) {
            saw_unknown = leaf->address == 0x10 && leaf->mapping_id == 0;
            continue;
        }
        const pprof_function *f =
            pprof_find_function(&prof, prof.lines[leaf->line_offset].function_id);
        pprof_string name = pprof_string_at(&prof, f->name);
        const pprof_mapping *m = pprof_find_mapping(&prof, leaf->mapping_id);
        pprof_string file = pprof_string_at(&prof, m->filename);
        if (s->location_count == 3) {
            saw_kernel = name.len == 10 && memcmp(name.ptr, "helper_one", 10) == 0 &&
                         file.len == 17 && memcmp(file.ptr, "[kernel.kallsyms]", 17) == 0;
        } else {
            saw_user = pprof_sample_value(&prof, i, 0) == 3 &&
                       name.len == strlen("agent_test_known_function") &&
                       memcmp(name.ptr, "agent_test_known_function", name.len) == 0 &&
                       pprof_string_at(&prof, m->build_id).len >= 16 && m->has_functions;
        }
    }
    assert_int_equal(total, 5);
    assert_true(saw_kernel);
    assert_true(saw_user);
    assert_true(saw_unknown);
    pprof_profile_free(&prof);
    strata_buffer_free(&out);

    /* The window ends: stacks clear, the process stays one more window, then goes. */
    agent_aggregator_next_window(&a);
    assert_int_equal(a.n_procs, 1);
    assert_int_equal(a.procs[0]->samples, 0);
    assert_int_equal(a.n_frames, 0);
    agent_aggregator_next_window(&a);
    assert_int_equal(a.n_procs, 0);

    free(user);
    free(kern);
    free(unknown);
    agent_symcache_free(c);
    agent_ksyms_free(&k);
    agent_aggregator_free(&a);
}

/* The value of label key of sample i, or "" when it has none. */
static const char *sample_label(const pprof_profile *prof, size_t i, const char *key, char *buf,
                                size_t cap) {
    const pprof_sample *s = &prof->samples[i];
    buf[0] = '\0';
    for (uint32_t l = 0; l < s->label_count; l++) {
        const pprof_label *lb = &prof->sample_labels[s->label_offset + l];
        pprof_string k = pprof_string_at(prof, lb->key), v = pprof_string_at(prof, lb->str);
        if (k.len == strlen(key) && memcmp(k.ptr, key, k.len) == 0)
            snprintf(buf, cap, "%.*s", (int)v.len, v.ptr);
    }
    return buf;
}

/* Samples of one stack on two threads and two CPUs, with each choice of per-sample labels. */
/* The decoded pprof's first sample type and period type, as "type/unit type/unit". */
static void profile_types(const pprof_profile *prof, char *out, size_t cap) {
    pprof_string st = pprof_string_at(prof, prof->sample_types[0].type);
    pprof_string su = pprof_string_at(prof, prof->sample_types[0].unit);
    pprof_string pt = pprof_string_at(prof, prof->period_type.type);
    pprof_string pu = pprof_string_at(prof, prof->period_type.unit);
    snprintf(out, cap, "%.*s/%.*s %.*s/%.*s", (int)st.len, st.ptr, (int)su.len, su.ptr, (int)pt.len,
             pt.ptr, (int)pu.len, pu.ptr);
}

/* Off-CPU records are stacks of their own beside CPU ticks with the same frames, counting the
 * blocked time scaled back by the rate; the off-CPU profile holds only them, as Parca's
 * wallclock:nanoseconds:samples:count, and the on-CPU profile only the ticks. */
static void test_off_cpu_stacks_and_profile(void **state) {
    (void)state;
    agent_aggregator a;
    assert_int_equal(agent_aggregator_init(&a, NULL, 0, NULL), 0);
    a.off_cpu_rate = 0.25; /* one blocking in four timed */
    uint64_t pc = (uint64_t)(uintptr_t)&agent_test_known_function + 1;
    struct agent_sample *tick = make_sample(getpid(), pc, 2);
    struct agent_sample *blocked = make_sample(getpid(), pc, 2);
    blocked->flags |= AGENT_SAMPLE_OFF_CPU;
    for (int i = 0; i < 2; i++)
        assert_int_equal(agent_aggregator_add(&a, tick, NULL), 0);
    blocked->value_ns = 1000000; /* 1 ms, then 3 ms: 4 ms timed, 16 ms estimated */
    assert_int_equal(agent_aggregator_add(&a, blocked, NULL), 0);
    blocked->value_ns = 3000000;
    assert_int_equal(agent_aggregator_add(&a, blocked, NULL), 0);
    blocked->value_ns = 0; /* a blocking shorter than the clock's grain still counts */
    assert_int_equal(agent_aggregator_add(&a, blocked, NULL), 0);
    agent_process *p = a.procs[0];
    assert_int_equal(p->n_stacks, 2);
    assert_int_equal(p->n_off_cpu, 1);
    assert_int_equal(p->samples, 5);

    agent_ksyms k;
    assert_int_equal(agent_ksyms_parse(kallsyms_fixture, strlen(kallsyms_fixture), &k, NULL), 0);
    agent_symcache *c = agent_symcache_new(NULL, NULL);
    pprof_gzipper *gz; /* one compressor for both profiles, as the agent keeps one */
    assert_int_equal(pprof_gzipper_new(AGENT_GZIP_LEVEL, &gz, NULL), 0);
    for (int off = 0; off < 2; off++) {
        agent_profile_context ctx = {&k,
                                     c,
                                     1000 * STRATA_NS_PER_SEC,
                                     10 * STRATA_NS_PER_SEC,
                                     STRATA_NS_PER_SEC / 19,
                                     off == 1,
                                     gz,
                                     NULL};
        strata_buffer out = STRATA_BUFFER_INIT;
        assert_int_equal(agent_profile_build(&a, p, &ctx, &out, NULL, NULL), 0);
        pprof_profile prof;
        assert_int_equal(pprof_decode(out.data, out.len, NULL, &prof, NULL), 0);
        char types[128];
        profile_types(&prof, types, sizeof types);
        assert_int_equal(prof.n_samples, 1);
        const pprof_sample *smp = &prof.samples[0];
        assert_int_equal(smp->location_count, 3); /* two kernel frames, the user pc */
        if (off) {
            assert_string_equal(types, "wallclock/nanoseconds samples/count");
            assert_int_equal(prof.period, 1);
            assert_int_equal(pprof_sample_value(&prof, 0, 0), 16000000 + 1);
        } else {
            assert_string_equal(types, "samples/count cpu/nanoseconds");
            assert_int_equal(prof.period, STRATA_NS_PER_SEC / 19);
            assert_int_equal(pprof_sample_value(&prof, 0, 0), 2);
        }
        pprof_profile_free(&prof);
        strata_buffer_free(&out);
    }
    agent_aggregator_next_window(&a);
    assert_int_equal(a.procs[0]->n_off_cpu, 0);
    pprof_gzipper_free(gz);
    agent_symcache_free(c);
    agent_ksyms_free(&k);
    agent_aggregator_free(&a);
    free(tick);
    free(blocked);
}

static void write_text(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

/* A fake /proc root with one process: pid's stat (named comm), cgroup, maps (one executable
 * mapping of exe, inode 1234) and exe link, in fp->dir/pid. */
typedef struct fake_proc {
    char dir[64], pdir[128], exe[256];
} fake_proc;

static void fake_proc_create(fake_proc *fp, int pid, const char *comm, const char *exe) {
    snprintf(fp->dir, sizeof fp->dir, "/tmp/strata-agent-proc-XXXXXX");
    assert_non_null(mkdtemp(fp->dir));
    snprintf(fp->pdir, sizeof fp->pdir, "%s/%d", fp->dir, pid);
    snprintf(fp->exe, sizeof fp->exe, "%s/exe", fp->pdir);
    assert_int_equal(mkdir(fp->pdir, 0700), 0);
    char text[256];
    snprintf(text, sizeof text,
             "%d (%s) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 12345 0 0 0 0 0 0 0\n", pid, comm);
    write_text(fp->pdir, "stat", text);
    write_text(fp->pdir, "cgroup", "0::/user.slice\n");
    snprintf(text, sizeof text, "00400000-00452000 r-xp 00000000 08:01 1234 %s\n", exe);
    write_text(fp->pdir, "maps", text);
    assert_int_equal(symlink(exe, fp->exe), 0);
}

static void fake_proc_remove(fake_proc *fp) {
    char path[512];
    const char *names[] = {"exe", "stat", "cgroup", "maps"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", fp->pdir, names[i]);
        assert_int_equal(unlink(path), 0);
    }
    assert_int_equal(rmdir(fp->pdir), 0);
    assert_int_equal(rmdir(fp->dir), 0);
}

/* A process seen anew (NEW_PROCESS: an exec, or its last ticks at exit) is read again: an exec
 * replaces what is known, an exiting process (no executable, no mappings left) does not. A fake
 * /proc root holds process 111. */
static void test_process_read_again_at_exec_not_at_exit(void **state) {
    (void)state;
    fake_proc fp;
    fake_proc_create(&fp, 111, "prog", "/usr/bin/prog-x");
    const char *pdir = fp.pdir, *exe = fp.exe;
    agent_aggregator a;
    assert_int_equal(agent_aggregator_init(&a, fp.dir, 0, NULL), 0);
    struct agent_sample *s = make_sample(111, 0x400100, 0);
    assert_int_equal(agent_aggregator_add(&a, s, NULL), 0);
    agent_process *p = a.procs[0];
    assert_true(p->have_proc);
    assert_string_equal(p->proc.executable, "/usr/bin/prog-x");
    /* exiting: the memory is gone, /proc still reads */
    assert_int_equal(unlink(exe), 0);
    write_text(pdir, "maps", "");
    s->flags = AGENT_SAMPLE_NEW_PROCESS;
    assert_int_equal(agent_aggregator_add(&a, s, NULL), 0);
    assert_string_equal(p->proc.executable, "/usr/bin/prog-x");
    assert_int_equal(p->proc.n_mappings, 1);
    /* an exec: the new image replaces the old */
    assert_int_equal(symlink("/usr/bin/prog-y", exe), 0);
    write_text(pdir, "maps", "00400000-00452000 r-xp 00000000 08:01 5678 /usr/bin/prog-y\n");
    assert_int_equal(agent_aggregator_add(&a, s, NULL), 0);
    assert_string_equal(p->proc.executable, "/usr/bin/prog-y");
    assert_int_equal(p->proc.mappings[0].inode, 5678);
    assert_int_equal(a.n_procs, 1);
    agent_aggregator_free(&a);
    free(s);
    fake_proc_remove(&fp);
}

/* An address outside the known mappings has the maps read again only when the sample is newer
 * than the maps: ticks taken before the read (a forked shell's, before its exec into a compiler)
 * cannot be in a mapping the read missed. Fake /proc root, process 112. */
static void test_maps_read_again_only_for_newer_samples(void **state) {
    (void)state;
    fake_proc fp;
    fake_proc_create(&fp, 112, "cc1", "/usr/bin/cc1");
    const char *pdir = fp.pdir;
    agent_aggregator a;
    assert_int_equal(agent_aggregator_init(&a, fp.dir, 0, NULL), 0);
    /* taken before the process was read: its other address (bash's, say) is not looked for */
    struct agent_sample *old = make_sample(112, 0x7f0000001000, 0);
    old->time_ns = (uint64_t)strata_monotonic_ns();
    assert_int_equal(agent_aggregator_add(&a, old, NULL), 0);
    assert_int_equal(a.stats.maps_reloads, 0);
    old->flags = AGENT_SAMPLE_OFF_LIST; /* nor for a walk flagged off the list */
    assert_int_equal(agent_aggregator_add(&a, old, NULL), 0);
    assert_int_equal(a.stats.maps_reloads, 0);
    /* taken after: a library mapped since the read (a dlopen) is found by reading again */
    write_text(pdir, "maps",
               "00400000-00452000 r-xp 00000000 08:01 1234 /usr/bin/cc1\n"
               "7f0000000000-7f0000002000 r-xp 00000000 08:01 99 /usr/lib/libplugin.so\n");
    struct agent_sample *fresh = make_sample(112, 0x7f0000001000, 0);
    fresh->time_ns = (uint64_t)strata_monotonic_ns() + 1;
    assert_int_equal(agent_aggregator_add(&a, fresh, NULL), 0);
    assert_int_equal(a.stats.maps_reloads, 1);
    assert_int_equal(a.procs[0]->proc.n_mappings, 2);
    /* and the older sample, again, still asks for nothing */
    old->flags = 0;
    assert_int_equal(agent_aggregator_add(&a, old, NULL), 0);
    assert_int_equal(a.stats.maps_reloads, 1);
    agent_aggregator_free(&a);
    free(old);
    free(fresh);
    fake_proc_remove(&fp);
}

/* A walk off the listed mappings re-reads the maps at once while each re-read finds them changed
 * (the loader mapping one library after another); one that finds them unchanged starts a backoff
 * of 100 ms. Fake /proc root, process 113. */
static void test_off_list_backoff_starts_when_maps_settle(void **state) {
    (void)state;
    fake_proc fp;
    fake_proc_create(&fp, 113, "prog", "/usr/bin/prog");
    agent_aggregator a;
    assert_int_equal(agent_aggregator_init(&a, fp.dir, 0, NULL), 0);
    struct agent_sample *s = make_sample(113, 0x400100, 0);
    s->time_ns = (uint64_t)strata_monotonic_ns();
    assert_int_equal(agent_aggregator_add(&a, s, NULL), 0); /* read at its first sample */
    assert_int_equal(a.stats.maps_reloads, 0);
    s->flags = AGENT_SAMPLE_OFF_LIST;
    static const char *const maps[] = {
        "00400000-00452000 r-xp 00000000 08:01 1234 /usr/bin/prog\n"
        "7f0000000000-7f0000002000 r-xp 00000000 08:01 97 /usr/lib/libc.so.6\n",
        "00400000-00452000 r-xp 00000000 08:01 1234 /usr/bin/prog\n"
        "7f0000000000-7f0000002000 r-xp 00000000 08:01 97 /usr/lib/libc.so.6\n"
        "7f0000010000-7f0000012000 r-xp 00000000 08:01 98 /usr/lib/libstdc++.so.6\n"};
    for (size_t i = 0; i < 2; i++) {
        write_text(fp.pdir, "maps", maps[i]);
        s->time_ns = (uint64_t)strata_monotonic_ns() + 1; /* each taken after the last read */
        assert_int_equal(agent_aggregator_add(&a, s, NULL), 0);
        assert_int_equal(a.stats.maps_reloads, i + 1); /* changed each time: no wait */
        assert_int_equal(a.procs[0]->proc.n_mappings, i + 2);
    }
    s->time_ns = (uint64_t)strata_monotonic_ns() + 1;
    assert_int_equal(agent_aggregator_add(&a, s, NULL), 0);
    assert_int_equal(a.stats.maps_reloads, 3); /* read again, unchanged: the backoff starts */
    s->time_ns += 50 * STRATA_NS_PER_MS;
    assert_int_equal(agent_aggregator_add(&a, s, NULL), 0);
    assert_int_equal(a.stats.maps_reloads, 3);
    s->time_ns += 60 * STRATA_NS_PER_MS; /* 110 ms after the unchanged read */
    assert_int_equal(agent_aggregator_add(&a, s, NULL), 0);
    assert_int_equal(a.stats.maps_reloads, 4);
    s->time_ns += 150 * STRATA_NS_PER_MS; /* unchanged again: now 200 ms */
    assert_int_equal(agent_aggregator_add(&a, s, NULL), 0);
    assert_int_equal(a.stats.maps_reloads, 4);
    agent_aggregator_free(&a);
    free(s);
    fake_proc_remove(&fp);
}

static void test_sample_labels(void **state) {
    (void)state;
    unsigned bits = 99;
    strata_error err;
    assert_int_equal(agent_parse_sample_labels("", &bits, NULL), 0);
    assert_int_equal(bits, 0); /* the default: none */
    assert_int_equal(agent_parse_sample_labels("thread_id,cpu", &bits, NULL), 0);
    assert_int_equal(bits, AGENT_LABEL_THREAD_ID | AGENT_LABEL_CPU);
    assert_int_equal(agent_parse_sample_labels("thread_id,pid", &bits, &err), -1);
    assert_non_null(strstr(err.message, "\"pid\""));
    static const struct {
        unsigned labels;
        size_t stacks;
    } cases[] = {{0, 1},
                 {AGENT_LABEL_THREAD_ID, 2},
                 {AGENT_LABEL_CPU, 2},
                 {AGENT_LABEL_THREAD_NAME, 2},
                 {AGENT_LABEL_THREAD_ID | AGENT_LABEL_THREAD_NAME | AGENT_LABEL_CPU, 3}};
    uint64_t pc = (uint64_t)(uintptr_t)&agent_test_known_function + 1;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        agent_aggregator a;
        assert_int_equal(agent_aggregator_init(&a, NULL, 0, NULL), 0);
        a.sample_labels = cases[c].labels;
        /* main thread on CPU 1 (twice), a worker thread on CPU 1, the main thread on CPU 3 */
        struct agent_sample *s = make_sample(getpid(), pc, 0);
        s->cpu = 1;
        assert_int_equal(agent_aggregator_add(&a, s, NULL), 0);
        assert_int_equal(agent_aggregator_add(&a, s, NULL), 0);
        s->tid = (__u32)getpid() + 1;
        strcpy(s->comm, "worker");
        assert_int_equal(agent_aggregator_add(&a, s, NULL), 0);
        s->tid = (__u32)getpid();
        strcpy(s->comm, "agent_test");
        s->cpu = 3;
        assert_int_equal(agent_aggregator_add(&a, s, NULL), 0);
        agent_process *p = a.procs[0];
        assert_int_equal(p->samples, 4);
        assert_int_equal(p->n_stacks, cases[c].stacks);

        agent_symcache *sc = agent_symcache_new(NULL, NULL);
        agent_profile_context ctx = {NULL,
                                     sc,
                                     1000 * STRATA_NS_PER_SEC,
                                     10 * STRATA_NS_PER_SEC,
                                     STRATA_NS_PER_SEC / 19,
                                     false,
                                     NULL,
                                     NULL};
        strata_buffer out = STRATA_BUFFER_INIT;
        assert_int_equal(agent_profile_build(&a, p, &ctx, &out, NULL, NULL), 0);
        pprof_profile prof;
        assert_int_equal(pprof_decode(out.data, out.len, NULL, &prof, NULL), 0);
        char want[64], buf[64];
        for (size_t i = 0; i < prof.n_samples; i++) {
            const char *tid = sample_label(&prof, i, "thread_id", buf, sizeof buf);
            if (cases[c].labels & AGENT_LABEL_THREAD_ID)
                assert_true(strtol(tid, NULL, 10) == getpid() ||
                            strtol(tid, NULL, 10) == getpid() + 1);
            else
                assert_string_equal(tid, "");
            const char *name = sample_label(&prof, i, "thread_name", buf, sizeof buf);
            if (cases[c].labels & AGENT_LABEL_THREAD_NAME)
                assert_true(strcmp(name, "agent_test") == 0 || strcmp(name, "worker") == 0);
            else
                assert_string_equal(name, "");
            const char *cpu = sample_label(&prof, i, "cpu", buf, sizeof buf);
            if (cases[c].labels & AGENT_LABEL_CPU)
                assert_true(strcmp(cpu, "1") == 0 || strcmp(cpu, "3") == 0);
            else
                assert_string_equal(cpu, "");
        }
        if (cases[c].labels ==
            (AGENT_LABEL_THREAD_ID | AGENT_LABEL_THREAD_NAME | AGENT_LABEL_CPU)) {
            /* exactly: (main, agent_test, 1) x2, (main+1, worker, 1), (main, agent_test, 3) */
            int seen = 0;
            for (size_t i = 0; i < prof.n_samples; i++) {
                char tid[16], name[16], cpu[16];
                sample_label(&prof, i, "thread_id", tid, sizeof tid);
                sample_label(&prof, i, "thread_name", name, sizeof name);
                sample_label(&prof, i, "cpu", cpu, sizeof cpu);
                int64_t v = pprof_sample_value(&prof, i, 0);
                snprintf(want, sizeof want, "%d", (int)getpid());
                if (strcmp(tid, want) == 0 && strcmp(name, "agent_test") == 0 &&
                    strcmp(cpu, "1") == 0 && v == 2)
                    seen |= 1;
                if (strcmp(tid, want) == 0 && strcmp(name, "agent_test") == 0 &&
                    strcmp(cpu, "3") == 0 && v == 1)
                    seen |= 2;
                snprintf(want, sizeof want, "%d", (int)getpid() + 1);
                if (strcmp(tid, want) == 0 && strcmp(name, "worker") == 0 &&
                    strcmp(cpu, "1") == 0 && v == 1)
                    seen |= 4;
            }
            assert_int_equal(seen, 7);
        }
        pprof_profile_free(&prof);
        strata_buffer_free(&out);
        agent_symcache_free(sc);
        free(s);
        agent_aggregator_free(&a);
    }
}

static void test_frame_limit_is_counted(void **state) {
    (void)state;
    agent_aggregator a;
    assert_int_equal(agent_aggregator_init(&a, NULL, 4, NULL), 0);
    struct agent_sample *s = make_sample(getpid(), 0x1000, 3);
    assert_int_equal(agent_aggregator_add(&a, s, NULL), 0); /* 4 frames: fits */
    s->ustack[0] = 0x2000;
    assert_int_equal(agent_aggregator_add(&a, s, NULL), 0); /* new stack: over the limit */
    s->ustack[0] = 0x1000;
    assert_int_equal(agent_aggregator_add(&a, s, NULL), 0); /* known stack: still counted */
    assert_int_equal(a.stats.over_limit, 1);
    assert_int_equal(a.procs[0]->samples, 2);
    assert_int_equal(a.procs[0]->stacks[0].count, 2);
    free(s);
    agent_aggregator_free(&a);
}

static int drop_agent_test(void *ctx, label_set *labels, bool *drop, strata_error *err) {
    (void)ctx, (void)err;
    const char *comm = label_set_get(labels, "comm");
    *drop = comm != NULL && strcmp(comm, "dropme") == 0;
    return label_set_set(labels, "team", label_set_get(labels, "__meta_system_node"), err);
}

static void test_labels(void **state) {
    (void)state;
    agent_proc p;
    memset(&p, 0, sizeof p);
    p.pid = 42;
    strcpy(p.comm, "server");
    p.executable = "/usr/bin/server";
    p.cgroup = "/docker/" ID64;
    strcpy(p.container_id, ID64);
    agent_label_options o = {"node-1", NULL, NULL, NULL};
    label_set ls;
    bool drop;
    assert_int_equal(agent_process_labels(&p, 42, "thread", &o, &ls, &drop, NULL), 0);
    assert_false(drop);
    strata_buffer text = STRATA_BUFFER_INIT;
    assert_int_equal(label_set_format(&ls, &text), 0);
    assert_int_equal(strata_buffer_append_byte(&text, 0), 0);
    assert_string_equal((char *)text.data,
                        "{__name__=\"strata_agent\", comm=\"server\", container_id=\"" ID64
                        "\", executable=\"/usr/bin/server\", node=\"node-1\", pid=\"42\"}");
    strata_buffer_free(&text);
    label_set_free(&ls);

    /* A process name cut at 15 bytes in the middle of a character is repaired (U+FFFD), as the
     * ingester refuses invalid UTF-8. */
    assert_int_equal(agent_process_labels(NULL, 8, "caf\xc3", &o, &ls, &drop, NULL), 0);
    assert_string_equal(label_set_get(&ls, "comm"), "caf\xef\xbf\xbd");
    label_set_free(&ls);

    /* A process gone before /proc was read: pid and comm from the sample, no container. */
    assert_int_equal(agent_process_labels(NULL, 7, "short", &o, &ls, &drop, NULL), 0);
    assert_string_equal(label_set_get(&ls, "comm"), "short");
    assert_string_equal(label_set_get(&ls, "executable"), "");
    assert_null(label_set_get(&ls, "container_id"));
    label_set_free(&ls);

    /* The relabel hook sees __meta_* labels, can add labels and drop processes. */
    o.relabel = drop_agent_test;
    assert_int_equal(agent_process_labels(&p, 42, "x", &o, &ls, &drop, NULL), 0);
    assert_false(drop);
    assert_string_equal(label_set_get(&ls, "team"), "node-1");
    assert_null(label_set_get(&ls, "__meta_process_pid"));
    label_set_free(&ls);
    strcpy(p.comm, "dropme");
    assert_int_equal(agent_process_labels(&p, 42, "x", &o, &ls, &drop, NULL), 0);
    assert_true(drop);
    label_set_free(&ls);
}

static void test_write_raw_and_bounded_queue(void **state) {
    (void)state;
    label_set ls = LABEL_SET_INIT;
    assert_int_equal(label_set_set(&ls, "__name__", "strata_agent", NULL), 0);
    assert_int_equal(label_set_set(&ls, "pid", "1", NULL), 0);
    uint8_t blob[4000];
    memset(blob, 0xab, sizeof blob);
    push_series series = {&ls, blob, sizeof blob};
    strata_buffer req = STRATA_BUFFER_INIT;
    assert_int_equal(push_write_raw_encode(&series, 1, &req, NULL), 0);
    assert_true(req.len > sizeof blob);
    assert_non_null(memmem(req.data, req.len, "strata_agent", 12));

    /* Nobody listens on port 1: requests stay queued, and the queue never passes its bound. */
    const char *addresses[] = {"127.0.0.1:1"};
    push_options o = {.addresses = addresses,
                      .n_addresses = 1,
                      .max_queue_bytes = 3 * req.len,
                      .timeout_ns = 200 * STRATA_NS_PER_MS,
                      .min_backoff_ns = 50 * STRATA_NS_PER_MS,
                      .max_backoff_ns = 100 * STRATA_NS_PER_MS};
    pusher *p = pusher_new(&o, NULL);
    assert_non_null(p);
    for (int i = 0; i < 10; i++)
        assert_int_equal(push_enqueue(p, &series, 1, NULL), 0);
    push_stats st;
    push_stats_get(p, &st);
    assert_true(st.queue_bytes <= 3 * req.len);
    assert_int_equal(st.dropped[PUSH_DROP_QUEUE_FULL], 7);
    assert_int_equal(push_flush(p, strata_monotonic_ns() + 300 * STRATA_NS_PER_MS), -1);
    /* Wait (slowly under valgrind) for a failed attempt to be recorded. */
    int64_t deadline = strata_monotonic_ns() + 20 * STRATA_NS_PER_SEC;
    do {
        usleep(20000);
        push_stats_get(p, &st);
    } while (st.errors == 0 && strata_monotonic_ns() < deadline);
    assert_true(st.errors >= 1);
    assert_int_equal(st.requests, 0);
    /* Refused, or (slow under valgrind) past the 200 ms deadline: both are retried. */
    assert_true(strstr(st.last_error, "UNAVAILABLE") != NULL ||
                strstr(st.last_error, "DEADLINE_EXCEEDED") != NULL);
    pusher_free(p);
    strata_buffer_free(&req);
    label_set_free(&ls);
}

/* -relabel-config: lib/relabel rules through the agent's hook drop processes and add labels. */
static void test_relabel_config(void **state) {
    (void)state;
    char path[] = "/tmp/agent_relabel_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *yaml =
        "relabel_configs:\n"
        "- {action: drop, source_labels: [__meta_process_executable_name], regex: \"sshd|cron\"}\n"
        "- source_labels: [__meta_process_executable_name, __meta_system_node]\n"
        "  regex: \"(.*);node-(.*)\"\n"
        "  target_label: service\n"
        "  replacement: \"${1}@$2\"\n"
        "- {action: labeldrop, regex: executable}\n";
    assert_int_equal(write(fd, yaml, strlen(yaml)), (ssize_t)strlen(yaml));
    close(fd);
    relabel_rules *rules = NULL;
    strata_error err;
    if (relabel_rules_load_file(path, &rules, &err) != 0)
        fail_msg("%s", err.message);
    agent_proc p;
    memset(&p, 0, sizeof p);
    p.pid = 42;
    strcpy(p.comm, "server");
    p.executable = "/usr/bin/server";
    p.cgroup = "/";
    agent_label_options o = {"node-1", agent_relabel_with_rules, rules, NULL};
    label_set ls;
    bool drop = true;
    assert_int_equal(agent_process_labels(&p, 42, "x", &o, &ls, &drop, &err), 0);
    assert_false(drop);
    strata_buffer text = STRATA_BUFFER_INIT;
    assert_int_equal(label_set_format(&ls, &text), 0);
    assert_int_equal(strata_buffer_append_byte(&text, 0), 0);
    assert_string_equal((char *)text.data, "{__name__=\"strata_agent\", comm=\"server\", "
                                           "node=\"node-1\", pid=\"42\", service=\"server@1\"}");
    strata_buffer_free(&text);
    label_set_free(&ls);

    p.executable = "/usr/sbin/sshd";
    assert_int_equal(agent_process_labels(&p, 42, "x", &o, &ls, &drop, &err), 0);
    assert_true(drop);
    label_set_free(&ls);
    relabel_rules_free(rules);

    /* A bad file is a flag error: exit code 2 before anything starts. */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("relabel_configs:\n- {action: hashmod, target_label: s}\n", f);
    fclose(f);
    char *argv[] = {"agent", "-remote-store", "127.0.0.1:1", "-relabel-config", path, NULL};
    assert_int_equal(agent_cli_main(5, argv), 2);
    unlink(path);
}

/* ---- demangling ---- */

/* What c++filt prints for name, or NULL when c++filt is not installed. */
static char *cxxfilt(const char *name) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "c++filt '%s' 2>/dev/null", name);
    FILE *f = popen(cmd, "r");
    if (f == NULL)
        return NULL;
    char line[512];
    char *got = fgets(line, sizeof line, f);
    int status = pclose(f);
    if (got == NULL || status != 0)
        return NULL;
    line[strcspn(line, "\n")] = '\0';
    return strdup(line);
}

static void test_demangle_as_cxxfilt(void **state) {
    (void)state;
    static const char *const cases[][2] = {
        {"_ZN2ns6Worker4spinEi", "ns::Worker::spin(int)"},
        {"_ZNSt6vectorIiSaIiEE9push_backERKi",
         "std::vector<int, std::allocator<int> >::push_back(int const&)"},
        {"_ZNK3foo3BarIcE3getEv", "foo::Bar<char>::get() const"},
        {"_ZN3fooplERKS_S1_", "foo::operator+(foo const&, foo const&)"},
        {"_Znwm", "operator new(unsigned long)"},
        {"_Z4mainv", "main()"},
        /* Rust, legacy (Itanium with a hash) and v0: the hash and the crate disambiguator go,
         * as perf and rustfilt print them (c++filt keeps both: not compared with it) */
        {"_ZN4core3fmt5write17h0123456789abcdefE", "core::fmt::write"},
        {"_RNvCs15kBYyAo9fc_7mycrate7example", "mycrate::example"},
    };
    size_t n_cases = sizeof cases / sizeof cases[0], n_cxx = n_cases - 2;
    for (size_t i = 0; i < n_cases; i++) {
        assert_true(agent_is_mangled(cases[i][0]));
        char *got = agent_demangle(cases[i][0]);
        assert_non_null(got);
        assert_string_equal(got, cases[i][1]);
        char *filt = cxxfilt(cases[i][0]);
        if (filt != NULL && i < n_cxx) /* the same as c++filt on this machine */
            assert_string_equal(got, filt);
        free(filt);
        free(got);
    }
    /* not mangled, or not understood: left alone */
    static const char *const plain[] = {"main", "runtime.mallocgc", "_start", "_R", "_Rx", ""};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        assert_null(agent_demangle(plain[i]));
    assert_null(agent_demangle("_ZN3foo")); /* truncated */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_demangle_as_cxxfilt),
        cmocka_unit_test(test_sample_labels),
        cmocka_unit_test(test_process_read_again_at_exec_not_at_exit),
        cmocka_unit_test(test_maps_read_again_only_for_newer_samples),
        cmocka_unit_test(test_off_list_backoff_starts_when_maps_settle),
        cmocka_unit_test(test_container_ids),
        cmocka_unit_test(test_maps_and_stat_parsing),
        cmocka_unit_test(test_cpu_list_and_durations),
        cmocka_unit_test(test_ksyms),
        cmocka_unit_test(test_elf_symbolizes_self_with_aslr),
        cmocka_unit_test(test_symcache_holds_budget_within_a_window),
        cmocka_unit_test(test_elf_names_read_from_the_file),
        cmocka_unit_test(test_symcache_names_follow_a_live_process),
        cmocka_unit_test(test_gopclntab),
        cmocka_unit_test(test_aggregate_and_build_profile),
        cmocka_unit_test(test_off_cpu_stacks_and_profile),
        cmocka_unit_test(test_frame_limit_is_counted),
        cmocka_unit_test(test_labels),
        cmocka_unit_test(test_write_raw_and_bounded_queue),
        cmocka_unit_test(test_relabel_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
