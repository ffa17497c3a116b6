// app is the program of tests/goversions, built twice by build.sh: once against dep-v1 (whose
// dep.Addition wastes its time in dep.Fib) and once against dep-v2 (which does not). Only the
// dependency differs between the two binaries, so a diff of their CPU profiles by function shows
// dep.Fib gone and everything else (runtime.main, main.main, main.work, dep.Addition) once.
//
// It serves net/http/pprof and keeps a fraction of one core busy (-busy, in percent): a CPU-light
// workload for small test machines that still samples dep.Fib many times a second in v1.
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"time"

	"strata.dev/goversions/dep"
)

var sink int

//go:noinline
func work(until time.Time) {
	for i := 0; time.Now().Before(until); i++ {
		sink = dep.Addition(i, sink)
	}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve /debug/pprof on")
	portFile := flag.String("port-file", "", "write the bound address here once listening")
	busy := flag.Int("busy", 25, "percent of one core to keep busy")
	flag.Parse()

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	if *portFile != "" {
		tmp := *portFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(ln.Addr().String()+"\n"), 0o644); err != nil {
			log.Fatal(err)
		}
		if err := os.Rename(tmp, *portFile); err != nil {
			log.Fatal(err)
		}
	}
	go func() { log.Fatal(http.Serve(ln, nil)) }()

	const cycle = 40 * time.Millisecond
	on := cycle * time.Duration(*busy) / 100
	for {
		work(time.Now().Add(on))
		time.Sleep(cycle - on)
	}
}
