/*
 * clock.h - time helpers. Strata keeps time as int64 nanoseconds since the Unix epoch (the pprof
 * convention) and durations as int64 nanoseconds; milliseconds appear only in meta.json (Thanos).
 */
#ifndef STRATA_COMMON_CLOCK_H
#define STRATA_COMMON_CLOCK_H

#include <stdint.h>

#define STRATA_NS_PER_MS INT64_C(1000000)
#define STRATA_NS_PER_SEC INT64_C(1000000000)

/* Wall-clock time, ns since the epoch. */
int64_t strata_now_ns(void);
/* Monotonic time in ns, for measuring durations and deadlines. */
int64_t strata_monotonic_ns(void);
/* CPU time used by the whole process, ns. */
int64_t strata_process_cpu_ns(void);

#endif
