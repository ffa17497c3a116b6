/*
 * thread.h - pthread set-up with its return codes as errors.
 *
 * pthread_mutex_init and pthread_cond_init can fail (POSIX allows EAGAIN, ENOMEM; glibc never
 * fails them with default attributes, other C libraries may), and every return code in Strata is
 * checked: these turn one into a strata_error with the call's name and errno text, so a
 * constructor checks its set-up in one line each. On failure nothing was initialised.
 */
#ifndef STRATA_COMMON_THREAD_H
#define STRATA_COMMON_THREAD_H

#include <pthread.h>
#include <stdbool.h>

#include "common/error.h"

int strata_mutex_init(pthread_mutex_t *mu, strata_error *err);
/* monotonic: timed waits take CLOCK_MONOTONIC deadlines (strata_monotonic_ns), else the
 * default clock (CLOCK_REALTIME). */
int strata_cond_init(pthread_cond_t *cv, bool monotonic, strata_error *err);

#endif
