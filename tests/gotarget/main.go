// gotarget is a small Go program that serves the Go runtime's real profiles over net/http/pprof.
// Strata's integration tests scrape it and push what it serves; `strata all` users get it as a
// demo workload. It burns CPU in a known call chain (cpuHotLoop -> fibonacci -> fibonacciStep),
// allocates in allocateBuffers, and contends a mutex, so every profile type has known functions.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

var sink []byte

//go:noinline
func fibonacciStep(n int) int {
	if n < 2 {
		return n
	}
	return fibonacciStep(n-1) + fibonacciStep(n-2)
}

//go:noinline
func fibonacci(n int) int {
	return fibonacciStep(n)
}

//go:noinline
func cpuHotLoop(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
			fibonacci(24)
		}
	}
}

// threadCPU is the CPU time of the calling OS thread (clock_gettime CLOCK_THREAD_CPUTIME_ID, exact
// unlike getrusage, which lags by up to a scheduler tick).
func threadCPU() time.Duration {
	var ts syscall.Timespec
	const clockThreadCPUTimeID = 3
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}

// cpuSliceLoop burns slice of CPU time every second on one locked OS thread. Go's CPU profiler
// times each thread apart (per-thread timers on Linux), so a profile of N seconds samples this
// thread about N x slice / 10ms times whatever else runs on the machine, while the process stays
// mostly idle: a fleet of such targets never serves an empty CPU profile.
//
//go:noinline
func cpuSliceLoop(slice time.Duration) {
	runtime.LockOSThread()
	for {
		start, deadline := threadCPU(), time.Now().Add(time.Second)
		for threadCPU()-start < slice {
			fibonacci(16)
		}
		time.Sleep(time.Until(deadline))
	}
}

//go:noinline
func allocateBuffers() {
	for i := 0; i < 64; i++ {
		sink = make([]byte, 64*1024)
	}
}

func contendMutex(mu *sync.Mutex) {
	mu.Lock()
	time.Sleep(time.Millisecond)
	mu.Unlock()
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve /debug/pprof on")
	burn := flag.Bool("burn", true, "burn CPU continuously in cpuHotLoop")
	portFile := flag.String("port-file", "", "write the bound address here once listening")
	burnSlice := flag.Duration("burn-slice", 0,
		"with -burn=false: burn this much CPU time every second on one thread (mostly idle targets whose CPU profiles are never empty)")
	workInterval := flag.Duration("work-interval", 50*time.Millisecond,
		"pause between rounds of allocations and mutex contention")
	flag.Parse()

	runtime.SetBlockProfileRate(1)
	runtime.SetMutexProfileFraction(1)

	stop := make(chan struct{})
	if *burn {
		go cpuHotLoop(stop)
	} else if *burnSlice > 0 && *burnSlice < time.Second {
		go cpuSliceLoop(*burnSlice)
	}
	go func() {
		var mu sync.Mutex
		for {
			allocateBuffers()
			var wg sync.WaitGroup
			for i := 0; i < 4; i++ {
				wg.Add(1)
				go func() { defer wg.Done(); contendMutex(&mu) }()
			}
			wg.Wait()
			time.Sleep(*workInterval)
		}
	}()
	http.HandleFunc("/burn", func(w http.ResponseWriter, r *http.Request) {
		deadline := time.Now().Add(200 * time.Millisecond)
		n := 0
		for time.Now().Before(deadline) {
			n += fibonacci(20)
		}
		fmt.Fprintf(w, "%d\n", n)
	})

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	addr := ln.Addr().String()
	if *portFile != "" {
		tmp := *portFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(addr+"\n"), 0o644); err != nil {
			log.Fatal(err)
		}
		if err := os.Rename(tmp, *portFile); err != nil {
			log.Fatal(err)
		}
	}
	log.Printf("gotarget listening on %s", addr)
	log.Fatal(http.Serve(ln, nil))
}
