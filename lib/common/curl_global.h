/*
 * curl_global.h - libcurl's process-wide initialisation, done once.
 *
 * curl_global_init is not thread-safe and must run before any other libcurl call; the bucket
 * backends (S3, Azure), the Kubernetes client and the scraper all use libcurl and may start in
 * any order on any thread. Each calls strata_curl_global_init first; the first call initialises
 * (under pthread_once) and every call reports the outcome. Built as its own library
 * (strata_curl_global) so that strata_common does not link libcurl.
 */
#ifndef STRATA_COMMON_CURL_GLOBAL_H
#define STRATA_COMMON_CURL_GLOBAL_H

#include "common/error.h"

/* 0, or -1 with INTERNAL and libcurl's reason when its initialisation failed. */
int strata_curl_global_init(strata_error *err);

#endif
