/*
 * curl_global.c - see curl_global.h.
 */
#include "common/curl_global.h"

#include <curl/curl.h>
#include <pthread.h>

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_OK;

static void init_curl(void) {
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int strata_curl_global_init(strata_error *err) {
    if (pthread_once(&curl_once, init_curl) != 0)
        return strata_error_set(err, STRATA_INTERNAL,
                                "cannot initialise libcurl: pthread_once failed");
    if (curl_init_rc != CURLE_OK)
        return strata_error_set(err, STRATA_INTERNAL, "cannot initialise libcurl: %s",
                                curl_easy_strerror(curl_init_rc));
    return 0;
}
