/*
 * tsan.h - happens-before edges ThreadSanitizer cannot see for itself.
 *
 * Strata's own code is built with -fsanitize=thread in the TSan pass (STRATA_TSAN); the libraries
 * it hands pointers through are not. A call's state written before grpc_call_start_batch and read
 * by the thread that takes the tag off a completion queue is ordered by grpc core's own locks,
 * which an uninstrumented libgrpc does not show to TSan, so every such hand-off reads as a race.
 * strata_tsan_release(p) before handing p over and strata_tsan_acquire(p) where it comes back draw
 * the edge. Outside a TSan build both are nothing.
 */
#ifndef STRATA_COMMON_TSAN_H
#define STRATA_COMMON_TSAN_H

#if defined(__SANITIZE_THREAD__)
#define STRATA_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STRATA_TSAN 1
#endif
#endif

#ifdef STRATA_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define strata_tsan_acquire(p) __tsan_acquire((void *)(p))
#define strata_tsan_release(p) __tsan_release((void *)(p))
#else
#define strata_tsan_acquire(p) ((void)(p))
#define strata_tsan_release(p) ((void)(p))
#endif

#endif
