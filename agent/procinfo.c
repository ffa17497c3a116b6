/*
 * procinfo.c - /proc parsing for the agent. See procinfo.h.
 */
#include "procinfo.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/array.h"

#define MAX_MAPPINGS 100000

/* Parses a hex number ending at a delimiter; advances *p past the delimiter. */
static bool parse_hex(const char **p, char delim, uint64_t *out) {
    const char *s = *p;
    uint64_t v = 0;
    int digits = 0;
    for (; *s != delim; s++, digits++) {
        int d = *s >= '0' && *s <= '9'   ? *s - '0'
                : *s >= 'a' && *s <= 'f' ? *s - 'a' + 10
                : *s >= 'A' && *s <= 'F' ? *s - 'A' + 10
                                         : -1;
        if (d < 0 || digits >= 16)
            return false;
        v = v << 4 | (uint64_t)d;
    }
    if (digits == 0)
        return false;
    *out = v;
    *p = s + 1;
    return true;
}

static bool parse_dec(const char **p, uint64_t *out) {
    const char *s = *p;
    uint64_t v = 0;
    if (*s < '0' || *s > '9')
        return false;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    *p = s;
    return true;
}

/* "start-end perms offset major:minor inode" - a hand parser: maps are read for every new
 * process, and sscanf was the agent's hottest function on a machine that starts many. */
static bool parse_maps_fields(const char **p, agent_mapping *out, bool *executable) {
    uint64_t major, minor;
    if (!parse_hex(p, '-', &out->start) || !parse_hex(p, ' ', &out->end))
        return false;
    const char *perms = *p;
    if (perms[0] == '\0' || perms[1] == '\0' || perms[2] == '\0' || perms[3] == '\0' ||
        perms[4] != ' ')
        return false;
    *executable = perms[2] == 'x';
    *p = perms + 5;
    if (!parse_hex(p, ' ', &out->offset) || !parse_hex(p, ':', &major) ||
        !parse_hex(p, ' ', &minor) || !parse_dec(p, &out->inode))
        return false;
    out->dev_major = (uint32_t)major;
    out->dev_minor = (uint32_t)minor;
    return out->end >= out->start && (**p == ' ' || **p == '\n' || **p == '\0');
}

int agent_parse_maps_line(const char *line, agent_mapping *out, bool *executable,
                          strata_error *err) {
    memset(out, 0, sizeof *out);
    const char *p = line;
    if (!parse_maps_fields(&p, out, executable))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "malformed maps line \"%.80s\"",
                                line);
    p += strspn(p, " ");
    size_t len = strcspn(p, "\n");
    if (len == 0)
        return 0;
    out->path = strndup(p, len);
    if (out->path == NULL)
        return strata_error_oom(err);
    return 0;
}

static bool is_hex64(const char *s, size_t len) {
    if (len != AGENT_CONTAINER_ID_LEN)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
            return false;
    return true;
}

/* Strips a runtime prefix and a .scope suffix from one path component; true if what remains is a
 * container id. */
static bool component_container_id(const char *c, size_t len, char *out) {
    static const char *const prefixes[] = {"docker-", "cri-containerd-", "crio-", "containerd-",
                                           "libpod-"};
    if (len > 6 && memcmp(c + len - 6, ".scope", 6) == 0)
        len -= 6;
    if (len >= 12 && memcmp(c, "crio-conmon-", 12) == 0)
        return false;
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        size_t pl = strlen(prefixes[i]);
        if (len > pl && memcmp(c, prefixes[i], pl) == 0) {
            c += pl;
            len -= pl;
            break;
        }
    }
    if (!is_hex64(c, len))
        return false;
    memcpy(out, c, len);
    out[len] = '\0';
    return true;
}

static bool path_container_id(const char *path, size_t len, char *out) {
    const char *end = path + len;
    bool found = false;
    while (path < end) {
        const char *slash = memchr(path, '/', (size_t)(end - path));
        size_t clen = (size_t)((slash != NULL ? slash : end) - path);
        if (clen > 0 && component_container_id(path, clen, out))
            found = true; /* the innermost match wins */
        path += clen + 1;
    }
    return found;
}

static void copy_cgroup(const char *path, size_t len, char *out, size_t out_len) {
    if (out == NULL || out_len == 0)
        return;
    if (len >= out_len)
        len = out_len - 1;
    memcpy(out, path, len);
    out[len] = '\0';
}

/* Splits a cgroup line "N:ctrls:/path" into the hierarchy number and the path. */
static bool split_cgroup_line(const char *line, size_t len, bool *v2, const char **path,
                              size_t *path_len) {
    const char *c1 = memchr(line, ':', len);
    if (c1 == NULL)
        return false;
    const char *c2 = memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line));
    if (c2 == NULL)
        return false;
    *v2 = c1 - line == 1 && line[0] == '0' && c2 == c1 + 1;
    *path = c2 + 1;
    *path_len = len - (size_t)(c2 + 1 - line);
    return true;
}

bool agent_container_id_from_cgroup(const char *text, char out[AGENT_CONTAINER_ID_LEN + 1],
                                    char *cgroup_out, size_t cgroup_out_len) {
    out[0] = '\0';
    copy_cgroup("", 0, cgroup_out, cgroup_out_len);
    bool found = false, have_cgroup = false;
    for (const char *line = text; *line != '\0';) {
        size_t len = strcspn(line, "\n");
        bool v2;
        const char *path;
        size_t path_len;
        if (split_cgroup_line(line, len, &v2, &path, &path_len)) {
            bool non_root = path_len > 1 || (path_len == 1 && path[0] != '/');
            if (non_root && (v2 || !have_cgroup)) {
                copy_cgroup(path, path_len, cgroup_out, cgroup_out_len);
                have_cgroup = have_cgroup || non_root;
            }
            if (!found)
                found = path_container_id(path, path_len, out);
        }
        line += len + (line[len] == '\n');
    }
    return found;
}

int agent_parse_stat(const char *text, char comm[16], uint64_t *start_time, strata_error *err) {
    const char *open = strchr(text, '(');
    const char *close = strrchr(text, ')');
    if (open == NULL || close == NULL || close < open)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "malformed stat");
    size_t len = (size_t)(close - open - 1);
    if (len > 15)
        len = 15;
    memcpy(comm, open + 1, len);
    comm[len] = '\0';
    /* After ")": field 3 (state) onwards; start time is field 22. */
    const char *p = close + 1;
    for (int field = 3; field < 22; field++) {
        p = strchr(p + 1, ' ');
        if (p == NULL)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "short stat");
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p + 1, &end, 10);
    if (end == p + 1 || errno != 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "bad start time in stat");
    *start_time = v;
    return 0;
}

/* One open and read (no stdio buffer: it runs for every process every window). */
static int read_small_file(const char *path, char *buf, size_t cap, strata_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return strata_error_set(
            err, errno == ENOENT || errno == ESRCH ? STRATA_NOT_FOUND : STRATA_UNAVAILABLE,
            "%s: %s", path, strerror(errno));
    size_t n = 0;
    while (n < cap - 1) {
        ssize_t got = read(fd, buf + n, cap - 1 - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            if (got < 0) {
                close(fd);
                return strata_error_set(err, STRATA_NOT_FOUND, "%s: read failed", path);
            }
            break;
        }
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    return 0;
}

int agent_proc_start_time(const char *proc_root, pid_t pid, uint64_t *start_time,
                          strata_error *err) {
    char path[256], text[1024], comm[16];
    snprintf(path, sizeof path, "%s/%d/stat", proc_root, (int)pid);
    if (read_small_file(path, text, sizeof text, err) != 0)
        return -1;
    return agent_parse_stat(text, comm, start_time, err);
}

static int cmp_mapping(const void *a, const void *b) {
    const agent_mapping *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static void free_mappings(agent_mapping *m, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(m[i].path);
    free(m);
}

static int push_mapping(agent_mapping **arr, size_t *n, size_t *cap, const agent_mapping *m,
                        strata_error *err) {
    if (STRATA_ARRAY_RESERVE_OR_OOM(*arr, *cap, *n + 1, err) != 0)
        return -1;
    (*arr)[(*n)++] = *m;
    return 0;
}

#define MAPS_READ_BUFFER (64 * 1024)

static int read_maps(const char *proc_root, pid_t pid, agent_mapping **out, size_t *n_out,
                     strata_error *err) {
    char path[256];
    snprintf(path, sizeof path, "%s/%d/maps", proc_root, (int)pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return strata_error_set(err, STRATA_NOT_FOUND, "%s: %s", path, strerror(errno));
    /* /proc files report no size, so stdio would read 1 KiB per call (after an fstat): eight
     * syscalls for a compiler's maps, read for every new process. The kernel fills a larger
     * buffer in one call (glibc uses a size only with a buffer given). */
    char *buffer = malloc(MAPS_READ_BUFFER);
    if (buffer != NULL)
        (void)setvbuf(f, buffer, _IOFBF, MAPS_READ_BUFFER);
    agent_mapping *arr = NULL;
    size_t n = 0, cap = 0;
    char line[4096 + 128];
    int rc = 0;
    while (rc == 0 && n < MAX_MAPPINGS && fgets(line, sizeof line, f) != NULL) {
        agent_mapping m;
        bool exec;
        const char *perms = strchr(line, ' ');
        if (perms == NULL || strlen(perms) < 4 || perms[3] != 'x')
            continue; /* only executable mappings matter; skip the rest unparsed */
        if (agent_parse_maps_line(line, &m, &exec, NULL) != 0)
            continue;
        if (!exec) {
            free(m.path);
            continue;
        }
        if ((rc = push_mapping(&arr, &n, &cap, &m, err)) != 0)
            free(m.path);
    }
    fclose(f);
    free(buffer);
    if (rc != 0) {
        free_mappings(arr, n);
        return -1;
    }
    if (n > 1) /* an exiting process has no mappings: no qsort of NULL */
        qsort(arr, n, sizeof *arr, cmp_mapping);
    *out = arr;
    *n_out = n;
    return 0;
}

int agent_proc_reload_maps(const char *proc_root, agent_proc *p, strata_error *err) {
    agent_mapping *m;
    size_t n;
    if (read_maps(proc_root, p->pid, &m, &n, err) != 0)
        return -1;
    free_mappings(p->mappings, p->n_mappings);
    p->mappings = m;
    p->n_mappings = n;
    return 0;
}

static char *read_exe(const char *proc_root, pid_t pid) {
    char path[256], target[4096];
    snprintf(path, sizeof path, "%s/%d/exe", proc_root, (int)pid);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n < 0)
        n = 0;
    target[n] = '\0';
    return strdup(target);
}

static int read_cgroup(const char *proc_root, agent_proc *p, strata_error *err) {
    char path[256], text[8192], cgroup[4096];
    snprintf(path, sizeof path, "%s/%d/cgroup", proc_root, (int)p->pid);
    if (read_small_file(path, text, sizeof text, NULL) != 0)
        text[0] = '\0'; /* no cgroup file: not fatal */
    agent_container_id_from_cgroup(text, p->container_id, cgroup, sizeof cgroup);
    p->cgroup = strdup(cgroup);
    return p->cgroup != NULL ? 0 : strata_error_oom(err);
}

int agent_proc_read(const char *proc_root, pid_t pid, agent_proc *out, strata_error *err) {
    memset(out, 0, sizeof *out);
    out->pid = pid;
    char path[256], text[1024];
    snprintf(path, sizeof path, "%s/%d/stat", proc_root, (int)pid);
    if (read_small_file(path, text, sizeof text, err) != 0 ||
        agent_parse_stat(text, out->comm, &out->start_time, err) != 0)
        return -1;
    out->executable = read_exe(proc_root, pid);
    if (out->executable == NULL) {
        agent_proc_free(out);
        return strata_error_oom(err);
    }
    if (read_cgroup(proc_root, out, err) != 0 ||
        read_maps(proc_root, pid, &out->mappings, &out->n_mappings, err) != 0) {
        agent_proc_free(out);
        return -1;
    }
    return 0;
}

const agent_mapping *agent_proc_find_mapping(const agent_proc *p, uint64_t addr) {
    size_t lo = 0, hi = p->n_mappings;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (addr < p->mappings[mid].start)
            hi = mid;
        else if (addr >= p->mappings[mid].end)
            lo = mid + 1;
        else
            return &p->mappings[mid];
    }
    return NULL;
}

void agent_proc_free(agent_proc *p) {
    free(p->executable);
    free(p->cgroup);
    free_mappings(p->mappings, p->n_mappings);
    memset(p, 0, sizeof *p);
}
