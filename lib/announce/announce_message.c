/*
 * announce_message.c - the version 1 wire format: "strata-block v1 <tenant> <ulid>\n".
 */
#include <stdio.h>
#include <string.h>

#include "announce/announce.h"
#include "announce_internal.h"
#include "common/tenant.h"

#define MAGIC "strata-block v1 "
#define MAGIC_LEN (sizeof MAGIC - 1)

/* The one tenant rule (common/tenant.h): announcements carry only tenants a write could create. */
bool announce_tenant_is_valid(const char *tenant, size_t len) {
    return tenant != NULL && strata_tenant_is_valid(tenant, len);
}

/* Canonical Crockford base32 as ulid_format writes it: digits and upper case without I L O U. */
static bool ulid_char_is_valid(char c) {
    return (c >= '0' && c <= '9') ||
           (c >= 'A' && c <= 'Z' && c != 'I' && c != 'L' && c != 'O' && c != 'U');
}

bool announce_ulid_is_valid(const char *ulid, size_t len) {
    if (ulid == NULL || len != ANNOUNCE_ULID_LEN)
        return false;
    if (ulid[0] < '0' || ulid[0] > '7') /* 26 * 5 = 130 bits: the top two must be zero */
        return false;
    for (size_t i = 0; i < len; i++) {
        if (!ulid_char_is_valid(ulid[i]))
            return false;
    }
    return true;
}

int announce_format_message(const char *tenant, const char *ulid, char *out, size_t out_size,
                            size_t *len_out, strata_error *err) {
    if (tenant == NULL || !announce_tenant_is_valid(tenant, strlen(tenant)))
        return strata_error_set(
            err, STRATA_INVALID_ARGUMENT,
            "announce: invalid tenant: want 1-150 characters of [A-Za-z0-9_.-]");
    if (ulid == NULL || !announce_ulid_is_valid(ulid, strlen(ulid)))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "announce: invalid ulid: want 26 upper-case Crockford base32 "
                                "characters");
    int n = snprintf(out, out_size, MAGIC "%s %s\n", tenant, ulid);
    if (n < 0 || (size_t)n >= out_size)
        return strata_error_set(err, STRATA_INTERNAL, "announce: message does not fit");
    *len_out = (size_t)n;
    return 0;
}

bool announce_parse_message(const void *data, size_t len, char *tenant, char *ulid) {
    const char *p = data;
    /* magic, a tenant of at least one character, a space, the ULID, the newline */
    if (p == NULL || len > ANNOUNCE_MESSAGE_MAX || len < MAGIC_LEN + 1 + 1 + ANNOUNCE_ULID_LEN + 1)
        return false;
    if (memcmp(p, MAGIC, MAGIC_LEN) != 0 || p[len - 1] != '\n')
        return false;
    const char *ulid_start = p + len - 1 - ANNOUNCE_ULID_LEN;
    const char *tenant_start = p + MAGIC_LEN;
    if (ulid_start[-1] != ' ')
        return false;
    size_t tenant_len = (size_t)(ulid_start - 1 - tenant_start);
    /* the character checks also reject spaces (extra fields) and NUL bytes */
    if (!announce_tenant_is_valid(tenant_start, tenant_len) ||
        !announce_ulid_is_valid(ulid_start, ANNOUNCE_ULID_LEN))
        return false;
    memcpy(tenant, tenant_start, tenant_len);
    tenant[tenant_len] = '\0';
    memcpy(ulid, ulid_start, ANNOUNCE_ULID_LEN);
    ulid[ANNOUNCE_ULID_LEN] = '\0';
    return true;
}
