/*
 * regex.cc - the C++ shim over RE2 behind regex.h: compile, match, capture group names.
 *
 * This is the only C++ in Strata and it stays small: everything that is not a call into RE2
 * (messages, templates) is C in regex.c. A strata_regex is an RE2 object compiled with `.`
 * matching newlines and without logging; matching is RE2::Match with ANCHOR_BOTH, which is Go's
 * ^(?s:PATTERN)$ (see regex.h). RE2 reports errors as values and does not throw, but it allocates
 * with operator new, so every entry point is noexcept and turns std::bad_alloc into
 * RESOURCE_EXHAUSTED: no exception reaches the C callers.
 */
/* lib/common's headers have no extern "C" of their own. */
extern "C" {
#include "common/buffer.h"
#include "common/error.h"
}
#include "regex/regex.h"
#include "regex/regex_internal.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>

#include <re2/re2.h>

struct strata_regex {
    strata_regex(const char *pattern, size_t len, const RE2::Options &options)
        : re(re2::StringPiece(pattern, len), options) {}
    RE2 re;
};

namespace {

/* Capture groups whose spans live on the stack; more go to the heap. */
constexpr size_t kStackGroups = 16;

int out_of_memory(strata_error *err) {
    return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                            "out of memory matching or compiling a regular expression");
}

} // namespace

extern "C" int strata_regex_compile(const char *pattern, const strata_regex_limits *limits,
                                    strata_regex **out, strata_error *err) noexcept {
    *out = nullptr;
    size_t max_bytes =
        limits != nullptr && limits->max_bytes > 0 ? limits->max_bytes : STRATA_REGEX_MAX_BYTES;
    int64_t max_mem =
        limits != nullptr && limits->max_mem > 0 ? limits->max_mem : STRATA_REGEX_MAX_MEM;
    size_t len = std::strlen(pattern);
    if (len > max_bytes)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "regular expression is %zu bytes, longer than the limit of %zu",
                                len, max_bytes);
    try {
        RE2::Options options;
        options.set_dot_nl(true);
        options.set_log_errors(false);
        options.set_max_mem(max_mem);
        std::unique_ptr<strata_regex> re(new strata_regex(pattern, len, options));
        if (re->re.error_code() == RE2::ErrorPatternTooLarge) {
            char reason[160];
            std::snprintf(reason, sizeof reason,
                          "too large once compiled (over the limit of %lld bytes of memory); use "
                          "fewer or smaller repetitions and classes",
                          static_cast<long long>(max_mem));
            return regex_error(err, STRATA_INVALID_ARGUMENT, pattern, reason);
        }
        if (!re->re.ok())
            return regex_error(err, STRATA_INVALID_ARGUMENT, pattern, re->re.error().c_str());
        re->re.CapturingGroupNames(); /* built once here, so later lookups never allocate */
        *out = re.release();
        return 0;
    } catch (const std::bad_alloc &) {
        return out_of_memory(err);
    } catch (...) {
        return strata_error_set(err, STRATA_INTERNAL,
                                "unexpected C++ exception compiling a "
                                "regular expression");
    }
}

extern "C" void strata_regex_free(strata_regex *re) noexcept {
    delete re;
}

extern "C" const char *strata_regex_pattern(const strata_regex *re) noexcept {
    return re->re.pattern().c_str();
}

extern "C" size_t strata_regex_group_count(const strata_regex *re) noexcept {
    return static_cast<size_t>(re->re.NumberOfCapturingGroups());
}

extern "C" const char *strata_regex_group_name(const strata_regex *re, size_t index) noexcept {
    try {
        const std::map<int, std::string> &names = re->re.CapturingGroupNames();
        auto it = index <= static_cast<size_t>(re->re.NumberOfCapturingGroups())
                      ? names.find(static_cast<int>(index))
                      : names.end();
        return it != names.end() ? it->second.c_str() : nullptr;
    } catch (...) { /* built at compile time; cannot allocate here */
        return nullptr;
    }
}

extern "C" int strata_regex_match_groups(const strata_regex *re, const char *value, size_t len,
                                         strata_regex_span *spans, size_t n,
                                         strata_error *err) noexcept {
    try {
        size_t groups = static_cast<size_t>(re->re.NumberOfCapturingGroups()) + 1;
        size_t want = n < groups ? n : groups;
        re2::StringPiece stack[kStackGroups];
        std::unique_ptr<re2::StringPiece[]> heap;
        re2::StringPiece *sub = stack;
        if (want > kStackGroups) {
            heap.reset(new re2::StringPiece[want]);
            sub = heap.get();
        }
        re2::StringPiece text(value, len);
        /* the whole match is the whole value: no need for RE2 to track it */
        if (!re->re.Match(text, 0, len, RE2::ANCHOR_BOTH, sub,
                          want > 1 ? static_cast<int>(want) : 0))
            return 0;
        if (want == 1)
            sub[0] = text;
        for (size_t i = 0; i < n; i++) {
            if (i < want && sub[i].data() != nullptr) {
                spans[i].start = sub[i].data() - value;
                spans[i].end = spans[i].start + static_cast<ptrdiff_t>(sub[i].size());
            } else {
                spans[i].start = spans[i].end = -1;
            }
        }
        return 1;
    } catch (const std::bad_alloc &) {
        return out_of_memory(err);
    } catch (...) {
        return strata_error_set(err, STRATA_INTERNAL,
                                "unexpected C++ exception matching a "
                                "regular expression");
    }
}

extern "C" int strata_regex_match(const strata_regex *re, const char *value, size_t len,
                                  strata_error *err) noexcept {
    return strata_regex_match_groups(re, value, len, nullptr, 0, err);
}
