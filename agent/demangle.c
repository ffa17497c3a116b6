/*
 * demangle.c - see demangle.h. libiberty's cplus_demangle allocates its answer with malloc; its
 * options here are c++filt's defaults (parameters and const/volatile qualifiers).
 */
#include "demangle.h"

#include <libiberty/demangle.h>

bool agent_is_mangled(const char *name) {
    if (name == NULL || name[0] != '_')
        return false;
    return name[1] == 'Z' || (name[1] == 'R' && name[2] >= 'A' && name[2] <= 'Z');
}

char *agent_demangle(const char *name) {
    if (!agent_is_mangled(name))
        return NULL;
    return cplus_demangle(name, DMGL_PARAMS | DMGL_ANSI | DMGL_AUTO);
}
