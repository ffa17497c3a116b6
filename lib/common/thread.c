/*
 * thread.c - see thread.h.
 */
#include "common/thread.h"

#include <string.h>
#include <time.h>

static int failed(const char *what, int rc, strata_error *err) {
    return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED, "%s: %s", what, strerror(rc));
}

int strata_mutex_init(pthread_mutex_t *mu, strata_error *err) {
    int rc = pthread_mutex_init(mu, NULL);
    return rc == 0 ? 0 : failed("pthread_mutex_init", rc, err);
}

int strata_cond_init(pthread_cond_t *cv, bool monotonic, strata_error *err) {
    if (!monotonic) {
        int rc = pthread_cond_init(cv, NULL);
        return rc == 0 ? 0 : failed("pthread_cond_init", rc, err);
    }
    pthread_condattr_t attr;
    int rc = pthread_condattr_init(&attr);
    if (rc != 0)
        return failed("pthread_condattr_init", rc, err);
    if ((rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)) != 0) {
        pthread_condattr_destroy(&attr);
        return failed("pthread_condattr_setclock", rc, err);
    }
    rc = pthread_cond_init(cv, &attr);
    pthread_condattr_destroy(&attr);
    return rc == 0 ? 0 : failed("pthread_cond_init", rc, err);
}
