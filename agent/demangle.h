/*
 * demangle.h - C++ and Rust symbol names as people read them, for the agent's profiles.
 *
 * ELF symbol tables hold mangled names (`_ZN2ns6Worker4spinEi`); pprof keeps both: a Function's
 * `name` is the demangled form (`ns::Worker::spin(int)`, what c++filt prints: parameters and
 * qualifiers included) and its `system_name` the mangled one, as Parca's agent and perf do.
 * Demangling is Debian's libiberty (`cplus_demangle`, the demangler of c++filt and gdb) in
 * automatic style: the Itanium C++ ABI (`_Z...`) and Rust's schemes, legacy (Itanium-shaped) and
 * v0 (`_R...`), whose hashes and crate disambiguators are dropped as perf and rustfilt drop them
 * (`core::fmt::write`, where c++filt prints `core::fmt::write::h0123456789abcdef`). Names that are
 * not mangled (C, Go, the kernel) are left alone.
 */
#ifndef STRATA_AGENT_DEMANGLE_H
#define STRATA_AGENT_DEMANGLE_H

#include <stdbool.h>

/* True when name looks mangled (`_Z`, or `_R` followed by an upper-case letter). */
bool agent_is_mangled(const char *name);

/* The demangled form of name (malloc'd; the caller frees it), or NULL when name is not mangled,
 * the demangler does not understand it, or memory ran out: callers then keep name as it is. */
char *agent_demangle(const char *name);

#endif
