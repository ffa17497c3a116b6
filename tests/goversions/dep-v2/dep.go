// Package dep, version 2: Addition no longer calls Fib; it spends a little time in its own loop,
// so dep.Addition still shows in the CPU profile while dep.Fib is gone.
package dep

// Fib is still exported (the API did not change) but nothing calls it any more.
//
//go:noinline
func Fib(n int) int {
	if n < 2 {
		return n
	}
	return Fib(n-1) + Fib(n-2)
}

// Addition adds a and b.
//
//go:noinline
func Addition(a, b int) int {
	s := 0
	for i := 0; i < 20000; i++ {
		s += i ^ a
	}
	return a + b + s&1 - s&1
}
