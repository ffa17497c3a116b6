// golabels is a Go program that tags its work with pprof labels, as services do to answer "which
// endpoint burns the CPU?": one goroutine serves two kinds of "request" in turn, each inside
// pprof.Do(ctx, pprof.Labels("endpoint", ...)), and a /checkout request does three times the work
// of a /browse one (the same function, fibonacci, three calls against one), so CPU profiles carry
// endpoint="/checkout" on about three quarters of the labelled samples and endpoint="/browse" on
// about a quarter, with their own stacks (main.checkout and main.browse). Strata's integration
// test (tests/integration/test_sample_labels.py) scrapes its net/http/pprof endpoints.
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"runtime/pprof"
	"time"
)

var sink int

//go:noinline
func fibonacci(n int) int {
	if n < 2 {
		return n
	}
	return fibonacci(n-1) + fibonacci(n-2)
}

//go:noinline
func checkout() {
	for i := 0; i < 3; i++ {
		sink += fibonacci(24)
	}
}

//go:noinline
func browse() {
	sink += fibonacci(24)
}

// serve runs requests forever, alternating endpoints, resting a little so that it does not take a
// whole core.
func serve() {
	ctx := context.Background()
	for {
		pprof.Do(ctx, pprof.Labels("endpoint", "/checkout"), func(context.Context) { checkout() })
		pprof.Do(ctx, pprof.Labels("endpoint", "/browse"), func(context.Context) { browse() })
		time.Sleep(time.Millisecond)
	}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve /debug/pprof on")
	portFile := flag.String("port-file", "", "write the bound address here once listening")
	flag.Parse()

	go serve()

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
	log.Printf("golabels listening on %s", addr)
	log.Fatal(http.Serve(ln, nil))
}
