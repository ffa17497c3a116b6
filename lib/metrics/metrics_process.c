/*
 * metrics_process.c - the standard process_* metrics, read from /proc/self at scrape time; see
 * metrics.h. A value that cannot be read keeps its previous value.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/clock.h"
#include "metrics/metrics_internal.h"

struct metrics_process_state {
    metrics_counter *cpu_seconds;
    metrics_gauge *resident_bytes;
    metrics_gauge *virtual_bytes;
    metrics_gauge *open_fds;
    metrics_gauge *max_fds;
    metrics_gauge *start_time;
};

void metrics_process_state_free(metrics_process_state *p) {
    free(p);
}

/* Reads up to size-1 bytes of a small /proc file, NUL-terminated. */
static bool read_small_file(const char *path, char *buf, size_t size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    size_t used = 0;
    while (used < size - 1) {
        ssize_t n = read(fd, buf + used, size - 1 - used);
        if (n <= 0)
            break;
        used += (size_t)n;
    }
    close(fd);
    buf[used] = '\0';
    return used > 0;
}

/* Field 22 of /proc/self/stat (starttime, clock ticks after boot). The command name (field 2)
 * may hold spaces and parentheses, so counting starts after the last ')'. */
static bool parse_stat_start_ticks(const char *stat, unsigned long long *ticks) {
    const char *p = strrchr(stat, ')');
    if (p == NULL)
        return false;
    p++;
    for (int field = 3; field < 22; field++) {
        p = strchr(p + 1, ' ');
        if (p == NULL)
            return false;
    }
    char *end;
    *ticks = strtoull(p + 1, &end, 10);
    return end != p + 1;
}

static bool read_boot_time(unsigned long long *btime) {
    char buf[8192];
    if (!read_small_file("/proc/stat", buf, sizeof buf))
        return false;
    const char *p = strstr(buf, "\nbtime ");
    /* NOLINTNEXTLINE(cert-err34-c): a number the kernel wrote */
    return p != NULL && sscanf(p + 7, "%llu", btime) == 1;
}

static bool process_start_seconds(double *out) {
    char stat[1024];
    unsigned long long ticks, btime;
    long hz = sysconf(_SC_CLK_TCK);
    if (hz <= 0 || !read_small_file("/proc/self/stat", stat, sizeof stat) ||
        !parse_stat_start_ticks(stat, &ticks) || !read_boot_time(&btime))
        return false;
    *out = (double)btime + (double)ticks / (double)hz;
    return true;
}

static void collect_memory(metrics_process_state *p) {
    char statm[256];
    unsigned long long size_pages, resident_pages;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || !read_small_file("/proc/self/statm", statm, sizeof statm) ||
        /* NOLINTNEXTLINE(cert-err34-c): numbers the kernel wrote */
        sscanf(statm, "%llu %llu", &size_pages, &resident_pages) != 2)
        return;
    metrics_gauge_set(p->resident_bytes, (int64_t)(resident_pages * (unsigned long long)page));
    metrics_gauge_set(p->virtual_bytes, (int64_t)(size_pages * (unsigned long long)page));
}

static void collect_fds(metrics_process_state *p) {
    DIR *dir = opendir("/proc/self/fd");
    if (dir != NULL) {
        int64_t count = 0;
        for (struct dirent *e = readdir(dir); e != NULL; e = readdir(dir))
            if (e->d_name[0] != '.')
                count++;
        closedir(dir);
        metrics_gauge_set(p->open_fds, count - 1); /* not the directory's own descriptor */
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        metrics_gauge_set(p->max_fds,
                          rl.rlim_cur == RLIM_INFINITY ? INT64_MAX : (int64_t)rl.rlim_cur);
}

static void collect_process(void *ctx) {
    metrics_process_state *p = ctx;
    metrics_counter_set_double(p->cpu_seconds, (double)strata_process_cpu_ns() / 1e9);
    collect_memory(p);
    collect_fds(p);
}

static int register_all(metrics_registry *r, metrics_process_state *p, strata_error *err) {
    p->cpu_seconds = metrics_counter_new(
        r,
        &(metrics_opts){.name = "process_cpu_seconds_total",
                        .help = "Total user and system CPU time spent in seconds.",
                        .kind = METRICS_DOUBLE},
        err);
    p->resident_bytes = metrics_gauge_new(r,
                                          &(metrics_opts){.name = "process_resident_memory_bytes",
                                                          .help = "Resident memory size in bytes."},
                                          err);
    p->virtual_bytes = metrics_gauge_new(r,
                                         &(metrics_opts){.name = "process_virtual_memory_bytes",
                                                         .help = "Virtual memory size in bytes."},
                                         err);
    p->open_fds = metrics_gauge_new(
        r, &(metrics_opts){.name = "process_open_fds", .help = "Number of open file descriptors."},
        err);
    p->max_fds =
        metrics_gauge_new(r,
                          &(metrics_opts){.name = "process_max_fds",
                                          .help = "Maximum number of open file descriptors."},
                          err);
    p->start_time = metrics_gauge_new(
        r,
        &(metrics_opts){.name = "process_start_time_seconds",
                        .help = "Start time of the process since unix epoch in seconds.",
                        .kind = METRICS_DOUBLE},
        err);
    if (p->cpu_seconds == NULL || p->resident_bytes == NULL || p->virtual_bytes == NULL ||
        p->open_fds == NULL || p->max_fds == NULL || p->start_time == NULL)
        return -1;
    return 0;
}

int metrics_register_process_metrics(metrics_registry *r, strata_error *err) {
    if (r == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "no metrics registry");
    metrics_process_state *p = calloc(1, sizeof *p);
    if (p == NULL)
        return strata_error_oom(err);
    if (register_all(r, p, err) != 0) {
        free(p);
        return -1;
    }
    double start;
    if (process_start_seconds(&start))
        metrics_gauge_set_double(p->start_time, start);
    pthread_mutex_lock(&r->lock);
    bool first = r->process == NULL;
    if (first)
        r->process = p;
    pthread_mutex_unlock(&r->lock);
    if (!first) {
        free(p);
        return 0;
    }
    if (metrics_registry_add_collector(r, collect_process, p, err) == 0)
        return 0;
    pthread_mutex_lock(&r->lock);
    r->process = NULL;
    pthread_mutex_unlock(&r->lock);
    free(p);
    return -1;
}
