/*
 * auth.c - see auth.h.
 */
#include "common/auth.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/tenant.h"

typedef struct credential {
    char *token; /* exactly one of token and subject */
    size_t token_len;
    char *subject;
    char **tenants;
    size_t n_tenants;
    bool any_tenant;
} credential;

struct strata_auth {
    credential *credentials;
    size_t n;
};

void strata_auth_free(strata_auth *a) {
    if (a == NULL)
        return;
    for (size_t i = 0; i < a->n; i++) {
        credential *c = &a->credentials[i];
        free(c->token);
        free(c->subject);
        for (size_t t = 0; t < c->n_tenants; t++)
            free(c->tenants[t]);
        free(c->tenants);
    }
    free(a->credentials);
    free(a);
}

static int copy_credential(credential *c, const strata_auth_credential *in, size_t index,
                           strata_error *err) {
    bool has_token = in->token != NULL, has_subject = in->subject != NULL;
    if (has_token == has_subject)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "auth: credential %zu: want a token or a subject", index);
    const char *value = has_token ? in->token : in->subject;
    if (value[0] == '\0')
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "auth: credential %zu: empty %s",
                                index, has_token ? "token" : "subject");
    if (in->n_tenants == 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "auth: credential %zu: no tenants (\"*\" allows every tenant)",
                                index);
    char *copy = strdup(value);
    if (copy == NULL)
        return strata_error_oom(err);
    if (has_token) {
        c->token = copy;
        c->token_len = strlen(copy);
    } else {
        c->subject = copy;
    }
    if ((c->tenants = calloc(in->n_tenants, sizeof *c->tenants)) == NULL)
        return strata_error_oom(err);
    for (size_t t = 0; t < in->n_tenants; t++) {
        const char *name = in->tenants[t];
        if (strcmp(name, "*") == 0) {
            c->any_tenant = true;
            continue;
        }
        if (!strata_tenant_is_valid(name, strlen(name)))
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "auth: credential %zu: tenant \"%.64s\" breaks the rule: %s",
                                    index, name, STRATA_TENANT_RULE);
        if ((c->tenants[c->n_tenants] = strdup(name)) == NULL)
            return strata_error_oom(err);
        c->n_tenants++;
    }
    return 0;
}

strata_auth *strata_auth_new(const strata_auth_credential *credentials, size_t n,
                             strata_error *err) {
    if (n == 0) {
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "auth: no credentials");
        return NULL;
    }
    strata_auth *a = calloc(1, sizeof *a);
    if (a == NULL || (a->credentials = calloc(n, sizeof *a->credentials)) == NULL) {
        free(a);
        strata_error_oom(err);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        a->n++;
        if (copy_credential(&a->credentials[i], &credentials[i], i, err) != 0) {
            strata_auth_free(a);
            return NULL;
        }
    }
    return a;
}

/* Constant time in the token's content: every byte of the configured token is compared whatever
 * the offered one holds (a length difference is folded into the result, not returned early). */
static bool token_equal(const credential *c, const char *offered, size_t offered_len) {
    uint8_t diff = (uint8_t)(offered_len != c->token_len);
    for (size_t i = 0; i < c->token_len; i++) {
        uint8_t o = i < offered_len ? (uint8_t)offered[i] : 0;
        diff |= (uint8_t)(o ^ (uint8_t)c->token[i]);
    }
    return diff == 0;
}

static bool allows(const credential *c, const char *tenant) {
    if (c->any_tenant)
        return true;
    for (size_t t = 0; t < c->n_tenants; t++)
        if (strcmp(c->tenants[t], tenant) == 0)
            return true;
    return false;
}

int strata_auth_check(const strata_auth *a, const char *authorization, size_t authorization_len,
                      const char *subject, const char *tenant, strata_error *err) {
    const char *token = NULL;
    size_t token_len = 0;
    if (authorization != NULL && authorization_len > 7 &&
        strncasecmp(authorization, "Bearer ", 7) == 0) {
        token = authorization + 7;
        token_len = authorization_len - 7;
        while (token_len > 0 && token[0] == ' ')
            token++, token_len--;
    }
    bool known = false, allowed = false;
    for (size_t i = 0; i < a->n; i++) {
        const credential *c = &a->credentials[i];
        bool match = c->token != NULL ? token != NULL && token_equal(c, token, token_len)
                                      : subject != NULL && strcmp(c->subject, subject) == 0;
        if (match) {
            known = true;
            allowed = allowed || allows(c, tenant);
        }
    }
    if (!known)
        return strata_error_set(err, STRATA_UNAUTHENTICATED,
                                authorization != NULL
                                    ? "authentication failed: unknown bearer token"
                                    : "authentication required: send \"authorization: Bearer "
                                      "<token>\" or a client certificate");
    if (!allowed)
        return strata_error_set(err, STRATA_PERMISSION_DENIED,
                                "tenant \"%s\" is not allowed for this credential", tenant);
    return 0;
}
