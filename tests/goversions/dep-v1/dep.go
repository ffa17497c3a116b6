// Package dep, version 1: Addition wastes its time in Fib (the regression version 2 fixes).
package dep

// Fib is the naive recursive Fibonacci: exponential work, so it dominates the CPU profile.
//
//go:noinline
func Fib(n int) int {
	if n < 2 {
		return n
	}
	return Fib(n-1) + Fib(n-2)
}

// fibOf20 is small enough for the compiler to inline into Addition: CPU profiles show it as an
// inlined frame (the location in Addition carries two lines, fibOf20's and Addition's).
func fibOf20() int {
	return Fib(20)
}

// Addition adds a and b, and (the bug) computes Fib(20) = 6765 only to subtract it again.
//
//go:noinline
func Addition(a, b int) int {
	return a + b + fibOf20() - 6765
}
