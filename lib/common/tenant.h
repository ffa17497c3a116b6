/*
 * tenant.h - the one tenant rule, applied to every call on every API, read and write.
 *
 * A tenant comes from the X-Scope-OrgID header (HTTP) or the x-scope-orgid metadata (gRPC), as in
 * Cortex, Thanos, Loki, Mimir and Pyroscope. Tenants name bucket prefixes (`<tenant>/<ULID>/`), so
 * the rule is the bucket-safe one the ingester always applied to writes: 1-150 characters of
 * [A-Za-z0-9_.-], not "." or "..". Reads obey the same rule, so a query can only name a tenant
 * that a write could have created, and a value that breaks the rule is refused (INVALID_ARGUMENT,
 * HTTP 400) with a message stating the rule, never mapped to another tenant.
 *
 * Only an absent header (or one with an empty value, which names no tenant) means the default
 * tenant, "anonymous". With several values the first is the tenant, as with Go's Header.Get.
 * Without authentication (docs/security.md) the tenant is whatever the client says it is.
 */
#ifndef STRATA_COMMON_TENANT_H
#define STRATA_COMMON_TENANT_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

#define STRATA_TENANT_HEADER "x-scope-orgid" /* gRPC metadata keys are lowercase */
#define STRATA_TENANT_HTTP_HEADER "X-Scope-OrgID"
#define STRATA_DEFAULT_TENANT "anonymous"
#define STRATA_TENANT_MAX_LENGTH 150
/* The rule in words, for messages and docs. */
#define STRATA_TENANT_RULE "1-150 characters of [A-Za-z0-9_.-], not \".\" or \"..\""

/* Room for any valid tenant and its NUL. */
typedef struct strata_tenant {
    char name[STRATA_TENANT_MAX_LENGTH + 1];
} strata_tenant;

/* True when tenant[0, len) obeys the rule. */
bool strata_tenant_is_valid(const char *tenant, size_t len);

/* Resolves a call's tenant from its header: value NULL (absent) or len 0 gives
 * STRATA_DEFAULT_TENANT; a value that obeys the rule is copied; anything else is INVALID_ARGUMENT
 * naming the header, what is wrong and the rule, and out is left empty. value need not be
 * NUL-terminated (gRPC metadata is not). */
int strata_tenant_from_header(const char *value, size_t len, strata_tenant *out, strata_error *err);

#endif
