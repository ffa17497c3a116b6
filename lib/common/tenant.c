/*
 * tenant.c - see tenant.h.
 */
#include "common/tenant.h"

#include <stdio.h>
#include <string.h>

static bool tenant_char_is_valid(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
}

static bool is_dot_name(const char *tenant, size_t len) {
    return (len == 1 && tenant[0] == '.') || (len == 2 && tenant[0] == '.' && tenant[1] == '.');
}

bool strata_tenant_is_valid(const char *tenant, size_t len) {
    if (tenant == NULL || len == 0 || len > STRATA_TENANT_MAX_LENGTH || is_dot_name(tenant, len))
        return false;
    for (size_t i = 0; i < len; i++)
        if (!tenant_char_is_valid(tenant[i]))
            return false;
    return true;
}

static int refuse(strata_error *err, const char *what) {
    return strata_error_set(
        err, STRATA_INVALID_ARGUMENT,
        "invalid tenant in " STRATA_TENANT_HEADER ": %s; a tenant is " STRATA_TENANT_RULE, what);
}

int strata_tenant_from_header(const char *value, size_t len, strata_tenant *out,
                              strata_error *err) {
    out->name[0] = '\0';
    if (value == NULL || len == 0) {
        memcpy(out->name, STRATA_DEFAULT_TENANT, sizeof STRATA_DEFAULT_TENANT);
        return 0;
    }
    char what[96];
    if (len > STRATA_TENANT_MAX_LENGTH) {
        snprintf(what, sizeof what, "%zu characters, more than %d", len, STRATA_TENANT_MAX_LENGTH);
        return refuse(err, what);
    }
    if (is_dot_name(value, len))
        return refuse(err, len == 1 ? "\".\" is not allowed" : "\"..\" is not allowed");
    for (size_t i = 0; i < len; i++) {
        if (!tenant_char_is_valid(value[i])) {
            unsigned char c = (unsigned char)value[i];
            if (c > 0x20 && c < 0x7f)
                snprintf(what, sizeof what, "'%c' at offset %zu is not allowed", c, i);
            else
                snprintf(what, sizeof what, "byte 0x%02x at offset %zu is not allowed", c, i);
            return refuse(err, what);
        }
    }
    memcpy(out->name, value, len);
    out->name[len] = '\0';
    return 0;
}
