// gohot burns CPU_SECONDS of CPU time (not wall time) in a known Go function, main.hotFunction,
// called from main.run, for the agent's tests. Built stripped (-ldflags=-s -w) so only
// .gopclntab can name its frames.
//
//	gohot CPU_SECONDS
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

//go:noinline
func hotFunction(n uint64) uint64 {
	x := n
	for i := 0; i < 1000000; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

//go:noinline
func run(d time.Duration) uint64 {
	end := cpuTime() + d
	var acc uint64
	for cpuTime() < end {
		acc += hotFunction(acc)
	}
	return acc
}

func main() {
	secs := 5.0
	if len(os.Args) > 1 {
		if v, err := strconv.ParseFloat(os.Args[1], 64); err == nil {
			secs = v
		}
	}
	fmt.Println(run(time.Duration(secs * float64(time.Second))))
}
