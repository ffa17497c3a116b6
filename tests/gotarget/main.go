// gotarget is a small Go program that serves the Go runtime's real profiles over net/http/pprof.
// Strata's integration tests scrape it and push what it serves; `strata all` users get it as a
// demo workload. It burns CPU in a known call chain (cpuHotLoop -> fibonacci -> fibonacciStep),
// allocates in allocateBuffers, and contends a mutex, so every profile type has known functions.
package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
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

// cpuSliceLoop burns slice of CPU time every period on one locked OS thread, the process staying
// mostly idle otherwise. Go's CPU profiler times each thread apart (per-thread CPU-time timers on
// Linux), but the kernel checks such a timer only at a scheduler tick that finds the thread
// running (every 4 ms at HZ=250): a slice of a few ticks makes sure the thread is sampled about
// once per 10 ms it burns, so a fleet of such targets never serves an empty CPU profile.
//
//go:noinline
func cpuSliceLoop(slice, period time.Duration) {
	runtime.LockOSThread()
	for {
		start, deadline := threadCPU(), time.Now().Add(period)
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

// protoFields calls fn for each field of a protobuf message: its number, and its varint value
// (wire type 0) or its bytes (wire type 2); fixed-size fields are skipped.
func protoFields(b []byte, fn func(field uint64, v uint64, data []byte) error) error {
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return errors.New("bad field key")
		}
		b = b[n:]
		var v uint64
		var data []byte
		switch key & 7 {
		case 0:
			if v, n = binary.Uvarint(b); n <= 0 {
				return errors.New("bad varint")
			}
			b = b[n:]
		case 1, 5:
			size := 8
			if key&7 == 5 {
				size = 4
			}
			if len(b) < size {
				return errors.New("truncated")
			}
			b = b[size:]
			continue
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return errors.New("bad length")
			}
			data, b = b[n:n+int(l)], b[n+int(l):]
		default:
			return fmt.Errorf("wire type %d", key&7)
		}
		if err := fn(key>>3, v, data); err != nil {
			return err
		}
	}
	return nil
}

// profileSummary reads a gzipped profile.proto message's time_nanos (Profile field 9) and the sum
// of its samples' first values (Profile.sample = 2, Sample.value = 2, packed or not): for a CPU
// profile, the number of samples.
func profileSummary(gz []byte) (timeNanos int64, samples int64, err error) {
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return 0, 0, err
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return 0, 0, err
	}
	err = protoFields(b, func(field, v uint64, data []byte) error {
		switch {
		case field == 9:
			timeNanos = int64(v)
		case field == 2 && data != nil:
			first := true
			return protoFields(data, func(field, v uint64, values []byte) error {
				if field != 2 || !first {
					return nil
				}
				first = false
				if values != nil { // packed
					if v, n := binary.Uvarint(values); n > 0 {
						samples += int64(v)
					}
					return nil
				}
				samples += int64(v)
				return nil
			})
		}
		return nil
	})
	return timeNanos, samples, err
}

// profileRecorder keeps a copy of what a handler answers.
type profileRecorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (p *profileRecorder) WriteHeader(status int) {
	p.status = status
	p.ResponseWriter.WriteHeader(status)
}

func (p *profileRecorder) Write(b []byte) (int, error) {
	p.body.Write(b)
	return p.ResponseWriter.Write(b)
}

// logCPUProfiles serves next and appends "TIME_NANOS SAMPLES" to path for every CPU profile it
// answers (/debug/pprof/profile), so a test knows what each scrape got.
func logCPUProfiles(next http.Handler, path string) http.Handler {
	var mu sync.Mutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/pprof/profile" {
			next.ServeHTTP(w, r)
			return
		}
		rec := &profileRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		if rec.status != http.StatusOK {
			return
		}
		t, n, err := profileSummary(rec.body.Bytes())
		if err != nil {
			log.Printf("cpu profile not logged: %v", err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			log.Printf("cpu profile not logged: %v", err)
			return
		}
		fmt.Fprintf(f, "%d %d\n", t, n)
		f.Close()
	})
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve /debug/pprof on")
	burn := flag.Bool("burn", true, "burn CPU continuously in cpuHotLoop")
	portFile := flag.String("port-file", "", "write the bound address here once listening")
	burnSlice := flag.Duration("burn-slice", 0,
		"with -burn=false: burn this much CPU time every -burn-period on one thread (mostly idle targets whose CPU profiles are never empty)")
	burnPeriod := flag.Duration("burn-period", time.Second, "see -burn-slice")
	workInterval := flag.Duration("work-interval", 50*time.Millisecond,
		"pause between rounds of allocations and mutex contention")
	profileLog := flag.String("profile-log", "",
		"append \"TIME_NANOS SAMPLES\" here for every CPU profile served")
	flag.Parse()

	runtime.SetBlockProfileRate(1)
	runtime.SetMutexProfileFraction(1)

	stop := make(chan struct{})
	if *burn {
		go cpuHotLoop(stop)
	} else if *burnSlice > 0 && *burnSlice < *burnPeriod {
		go cpuSliceLoop(*burnSlice, *burnPeriod)
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
	var handler http.Handler = http.DefaultServeMux
	if *profileLog != "" {
		handler = logCPUProfiles(handler, *profileLog)
	}
	log.Fatal(http.Serve(ln, handler))
}
