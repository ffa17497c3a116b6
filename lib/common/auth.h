/*
 * auth.h - bearer-token and client-certificate authentication with a tenant map, the one rule both
 * servers apply before any handler (lib/rpc for every gRPC method, lib/http for every route but
 * /ready and /metrics); docs/security.md.
 *
 * A credential is a bearer token (the "authorization: Bearer <token>" metadata or HTTP header) or
 * the subject of a client certificate verified by mutual TLS ("CN=agent,O=example", RFC 2253 as
 * grpc and GnuTLS print it). Each credential allows a list of tenants, or every tenant with "*".
 * A request without a known credential is UNAUTHENTICATED (HTTP 401); a known credential naming a
 * tenant (X-Scope-OrgID, default "anonymous") outside its list is PERMISSION_DENIED (HTTP 403).
 * A request may carry both: it is allowed when either credential allows the tenant.
 *
 * Tokens are compared in constant time (every configured token is compared in full, whatever
 * matches), so the time to refuse a token says nothing about the tokens configured.
 *
 * Without an auth (NULL), nothing is checked: the tenant is whatever the client says.
 */
#ifndef STRATA_COMMON_AUTH_H
#define STRATA_COMMON_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

typedef struct strata_auth strata_auth;

/* One credential: exactly one of token and subject; tenants (copied) or "*" for every one. */
typedef struct strata_auth_credential {
    const char *token;   /* bearer token */
    const char *subject; /* client certificate subject */
    const char *const *tenants;
    size_t n_tenants;
} strata_auth_credential;

/* Copies the credentials. INVALID_ARGUMENT for none, an empty token or subject, both or neither
 * set, no tenants, or a tenant that breaks the tenant rule (common/tenant.h) and is not "*". */
strata_auth *strata_auth_new(const strata_auth_credential *credentials, size_t n,
                             strata_error *err);
void strata_auth_free(strata_auth *auth);

/* Checks one request. authorization: the Authorization value (not NUL-terminated; NULL when
 * absent); subject: the verified client certificate's subject (NULL when none); tenant: the
 * request's resolved tenant. 0 when allowed, else -1 with UNAUTHENTICATED or PERMISSION_DENIED. */
int strata_auth_check(const strata_auth *auth, const char *authorization, size_t authorization_len,
                      const char *subject, const char *tenant, strata_error *err);

#endif
