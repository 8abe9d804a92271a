// SPDX-License-Identifier: MIT
// goprog - a Go program for the supervised-mode tests, built by
// tests/integration/test_supervise_go.py with Debian's golang-go (standard
// library only). The Go runtime makes raw system calls on non-blocking
// sockets with an edge-triggered epoll: no LD_PRELOAD library reaches it.
//
//	goprog get URL FILE            net/http GET, body into FILE
//	goprog connect ADDR N G        N connects to ADDR from G goroutines
//	goprog serve SIZE [MS]         net/http server of SIZE bytes on "/"
//	                               (each answer MS ms late), prints its
//	                               port, runs until killed
//	goprog files DIR               http.FileServer of DIR (sendfile), the same
//
// get and connect print one JSON line: {"elapsed": s, "bytes": n, "late_ms": m}
// where late_ms is how late a 10 ms ticker ran at worst meanwhile.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

func ticker(stop chan struct{}, late *float64) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			if d := float64(now.Sub(last))/1e6 - 10; d > *late {
				*late = d
			}
			last = now
		}
	}
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: goprog get|connect|serve ...")
		os.Exit(2)
	}
	var late float64
	stop := make(chan struct{})
	t0 := time.Now()
	var n int64
	switch os.Args[1] {
	case "get":
		go ticker(stop, &late)
		resp, err := http.Get(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		f, err := os.Create(os.Args[3])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		n, err = io.Copy(f, resp.Body)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		resp.Body.Close()
		f.Close()
	case "connect":
		go ticker(stop, &late)
		total, _ := strconv.Atoi(os.Args[3])
		g, _ := strconv.Atoi(os.Args[4])
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i := 0; i < g; i++ {
			wg.Add(1)
			go func(k int) {
				defer wg.Done()
				for j := k; j < total; j += g {
					c, err := net.Dial("tcp", os.Args[2])
					if err != nil {
						fmt.Fprintln(os.Stderr, err)
						os.Exit(1)
					}
					c.Close()
					mu.Lock()
					n++
					mu.Unlock()
				}
			}(i)
		}
		wg.Wait()
	case "files":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(ln.Addr().(*net.TCPAddr).Port)
		http.Serve(ln, http.FileServer(http.Dir(os.Args[2])))
		return
	case "serve":
		size, _ := strconv.Atoi(os.Args[2])
		body := make([]byte, size)
		for i := range body {
			body[i] = byte(i*7 + 3)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(ln.Addr().(*net.TCPAddr).Port)
		delay := 0
		if len(os.Args) > 3 {
			delay, _ = strconv.Atoi(os.Args[3])
		}
		http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(time.Duration(delay) * time.Millisecond)
			w.Header().Set("Content-Length", strconv.Itoa(size))
			w.Write(body)
		})
		http.Serve(ln, nil)
		return
	}
	close(stop)
	out, _ := json.Marshal(map[string]interface{}{
		"elapsed": time.Since(t0).Seconds(), "bytes": n, "late_ms": late})
	fmt.Println(string(out))
}
