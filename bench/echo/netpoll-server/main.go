// Echo server on github.com/cloudwego/netpoll for ringx's echo benchmark (bench/echo.py).
//
// Protocol (the netpoll benchmark's): each message is a 4-byte big-endian length followed by
// that many bytes; the server decodes the length, reads the payload and writes a new message
// framed the same way, as the handler of cloudwego/netpoll-benchmark does (decode, copy,
// encode, Flush per message).
//
// Single-threaded as far as netpoll allows: GOMAXPROCS=1 and one poller loop (the Go runtime
// still has its sysmon thread and GC helpers; the harness pins the whole process to CPU 0).
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"time"

	"github.com/cloudwego/netpoll"
)

const maxMessage = 16 << 20

func handle(ctx context.Context, conn netpoll.Connection) error {
	reader, writer := conn.Reader(), conn.Writer()
	hdr, err := reader.Next(4)
	if err != nil {
		return err
	}
	n := int(binary.BigEndian.Uint32(hdr))
	if n > maxMessage {
		conn.Close()
		return fmt.Errorf("message of %d bytes", n)
	}
	payload, err := reader.Next(n)
	if err != nil {
		return err
	}
	out, err := writer.Malloc(4 + n)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(out, uint32(n))
	copy(out[4:], payload)
	if err := reader.Release(); err != nil {
		return err
	}
	return writer.Flush()
}

func main() {
	addr := flag.String("addr", "127.0.0.1:7001", "address to listen on")
	procs := flag.Int("procs", 1, "GOMAXPROCS")
	flag.Parse()
	runtime.GOMAXPROCS(*procs)
	if err := netpoll.SetNumLoops(1); err != nil {
		log.Fatal(err)
	}
	ln, err := netpoll.CreateListener("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	loop, err := netpoll.NewEventLoop(handle,
		netpoll.WithReadTimeout(30*time.Second),
		netpoll.WithIdleTimeout(10*time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "netpoll echo server on %s (GOMAXPROCS=%d, 1 poller)\n", *addr, runtime.GOMAXPROCS(0))
	if err := loop.Serve(ln); err != nil {
		log.Fatal(err)
	}
}
