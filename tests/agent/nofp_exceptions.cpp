// nofp_exceptions.cpp - a C++ CPU burner without frame pointers whose hot paths run through
// Debian's libstdc++, libgcc_s and libc, for the DWARF (.eh_frame) unwinding test
// (tests/integration/test_agent.py, AgentDwarfUnwindTest). Built g++ -O2 -g -fomit-frame-pointer.
// Two hot paths, taking turns:
//
//   main -> throw_loop -> thrower -> __cxa_throw (libstdc++) -> _Unwind_RaiseException (libgcc_s)
//        -> the personality routine (libstdc++), _Unwind_Find_FDE -> dl_iterate_phdr (libc), ...
//        thrower throws std::runtime_error and throw_loop catches it
//   main -> format_loop -> std::ostream::operator<<(double) (libstdc++) -> std::num_put ...
//        -> vsnprintf (libc) -> the printf internals; std::string copies (operator new, malloc)
//
// The functions are noinline (and noclone, so no .constprop/.isra copies) and use their callees'
// results after the call, so that no call is a tail call.
//
//   nofp_exceptions CPU_SECONDS
//
// It burns CPU_SECONDS of its own CPU time (not wall time).
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <sstream>
#include <stdexcept>
#include <string>

#define HOT __attribute__((noinline, noclone))

static double cpu_now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// Some arithmetic of its own (samples land here too), then a throw.
HOT unsigned long thrower(unsigned long seed) {
    unsigned long table[48];
    unsigned long h = seed | 1;
    for (int i = 0; i < 48; i++) {
        h = h * 6364136223846793005UL + 1442695040888963407UL;
        table[i] = h;
    }
    for (int r = 0; r < 500; r++) {
        h = h * 6364136223846793005UL + 1442695040888963407UL;
        table[h % 48] ^= h >> 7;
        h ^= table[(h >> 33) % 48];
    }
    if (h != 0) // always: the compiler cannot see that
        throw std::runtime_error("thrown from thrower");
    return table[seed % 48];
}

HOT unsigned long throw_loop(unsigned long seed, int n) {
    unsigned long caught = 0;
    for (int i = 0; i < n; i++) {
        try {
            caught += thrower(seed + static_cast<unsigned long>(i));
        } catch (const std::runtime_error &e) {
            caught += static_cast<unsigned long>(e.what()[i % 8]);
        }
    }
    return caught;
}

HOT unsigned long format_loop(unsigned long seed, int n) {
    unsigned long total = 0;
    for (int i = 0; i < n; i++) {
        std::ostringstream os;
        os.precision(17);
        os << static_cast<double>(seed + static_cast<unsigned long>(i)) / 7.0 << ' '
           << seed * static_cast<unsigned long>(i) << ' ' << 1.0 / (i + 1);
        std::string s = os.str();
        std::string t = s + s;
        total += t.size() + static_cast<unsigned char>(t[t.size() / 2]);
    }
    return total;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? std::atof(argv[1]) : 5;
    double until = cpu_now() + seconds;
    unsigned long r = 1;
    while (cpu_now() < until) {
        r += throw_loop(r, 100);
        r += format_loop(r, 400);
    }
    std::printf("%lu\n", r);
    return 0;
}
