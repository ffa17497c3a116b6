// cxxchain.cpp - a C++ CPU burner with a known call chain of mangled names for the agent's tests:
// main -> ns::Worker::run(double) -> ns::Worker::spin(unsigned long), where spin spins. Built
// with frame pointers and no inlining (tests/integration/test_agent.py); the profile must show
// the demangled names (as c++filt prints them) with the mangled ones as system names.
//
//   cxxchain CPU_SECONDS
#include <cstdlib>
#include <ctime>

namespace ns {

class Worker {
  public:
    __attribute__((noinline)) unsigned long spin(unsigned long n);
    __attribute__((noinline)) unsigned long run(double seconds);

  private:
    volatile unsigned long spins_ = 0;
};

static double thread_seconds() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

unsigned long Worker::spin(unsigned long n) {
    for (unsigned long i = 0; i < n; i++)
        spins_ = spins_ + 1;
    return spins_;
}

unsigned long Worker::run(double seconds) {
    double until = thread_seconds() + seconds;
    unsigned long r = 0;
    while (thread_seconds() < until)
        r += spin(1000000);
    return r;
}

} // namespace ns

int main(int argc, char **argv) {
    ns::Worker w;
    return w.run(argc > 1 ? std::atof(argv[1]) : 2.0) == 0 ? 1 : 0;
}
