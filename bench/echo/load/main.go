// Load generator for the length-prefixed echo protocol (4-byte big-endian length, then the
// payload; the server answers with the same framing).
//
// One thread, one epoll loop over non-blocking sockets (golang.org/x/sys/unix), so that the
// client costs little and its timing does not depend on Go's timer granularity.
//
//	-rate 0  closed loop: each connection sends its next message as soon as the echo of the
//	         previous one arrived (one message in flight per connection).
//	-rate R  open loop: message k is scheduled at start + k/R s on connection k mod N,
//	         whatever the replies do; latency is measured from the *scheduled* send time, so
//	         a stalled server is charged for the whole stall (no coordinated omission). The
//	         loop busy-polls epoll while a send is due within 2 ms, so sends leave on time
//	         (send_lag_* in the output says how late they actually left).
//
// Output: one JSON object on stdout. With -handshake the generator prints "ready" once every
// connection is up and waits for a line on stdin before starting, and prints the JSON then
// waits for another line before closing its connections, so that a harness can read the
// server's CPU counters around exactly the measured traffic.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
	"golang.org/x/sys/unix"
)

type conn struct {
	fd       int
	owed     int     // bytes still to write (whole messages, identical, so only a count)
	wpos     int     // position in the current message stream (mod msgLen)
	hdrBuf   [4]byte // partial header of the reply being read
	hdrN     int
	left     int     // payload bytes of the current reply still to read
	sched    []int64 // send times (ns since start) of the messages in flight, FIFO
	schedH   int
	epollOut bool
}

var (
	msgLen  int
	stream  []byte // several messages back to back, written from at offset wpos
	epfd    int
	start   time.Time
	lat     = hdr.New(1, 60_000_000_000, 3) // ns
	sendLag = hdr.New(1, 60_000_000_000, 3) // ns, open loop only
)

func now() int64 { return int64(time.Since(start)) }

func die(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "load: "+f+"\n", a...)
	os.Exit(1)
}

func (c *conn) flush() {
	for c.owed > 0 {
		off := c.wpos % msgLen
		n := len(stream) - off
		if n > c.owed {
			n = c.owed
		}
		w, err := unix.Write(c.fd, stream[off:off+n])
		if err == unix.EAGAIN {
			break
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			die("write: %v", err)
		}
		c.owed -= w
		c.wpos = (c.wpos + w) % msgLen
	}
	want := c.owed > 0
	if want != c.epollOut {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(c.fd)}
		if want {
			ev.Events |= unix.EPOLLOUT
		}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_MOD, c.fd, &ev); err != nil {
			die("epoll_ctl: %v", err)
		}
		c.epollOut = want
	}
}

func (c *conn) send(at int64) {
	c.sched = append(c.sched, at)
	c.owed += msgLen
	c.flush()
}

// read consumes what the socket has; calls done(sentAt) per complete reply.
func (c *conn) read(buf []byte, size int, done func(*conn, int64)) {
	for {
		n, err := unix.Read(c.fd, buf)
		if err == unix.EAGAIN {
			return
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			die("read: %v", err)
		}
		if n == 0 {
			die("server closed a connection")
		}
		p := buf[:n]
		for len(p) > 0 {
			if c.left == 0 && c.hdrN < 4 {
				k := copy(c.hdrBuf[c.hdrN:], p)
				c.hdrN += k
				p = p[k:]
				if c.hdrN < 4 {
					break
				}
				if l := int(binary.BigEndian.Uint32(c.hdrBuf[:])); l != size {
					die("reply of %d bytes, sent %d", l, size)
				}
				c.left = size
			}
			k := c.left
			if k > len(p) {
				k = len(p)
			}
			c.left -= k
			p = p[k:]
			if c.left == 0 {
				c.hdrN = 0
				if c.schedH >= len(c.sched) {
					die("reply without a request")
				}
				at := c.sched[c.schedH]
				c.schedH++
				if c.schedH == len(c.sched) {
					c.sched, c.schedH = c.sched[:0], 0
				} else if c.schedH > 4096 {
					c.sched = append(c.sched[:0], c.sched[c.schedH:]...)
					c.schedH = 0
				}
				done(c, at)
			}
		}
		if n < len(buf) {
			return
		}
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:7000", "server address")
	nconns := flag.Int("conns", 10, "connections")
	size := flag.Int("size", 1024, "payload bytes per message")
	dur := flag.Duration("duration", 3*time.Second, "measured duration")
	rate := flag.Float64("rate", 0, "messages/s across all connections (0: closed loop)")
	drain := flag.Duration("drain", 2*time.Second, "after the duration, wait at most this long for replies in flight")
	handshake := flag.Bool("handshake", false, "print \"ready\" and wait for a line on stdin before starting and before closing")
	flag.Parse()

	ta, err := net.ResolveTCPAddr("tcp4", *addr)
	if err != nil {
		die("%v", err)
	}
	sa := &unix.SockaddrInet4{Port: ta.Port}
	copy(sa.Addr[:], ta.IP.To4())
	msgLen = 4 + *size
	one := make([]byte, msgLen)
	binary.BigEndian.PutUint32(one, uint32(*size))
	for i := 4; i < msgLen; i++ {
		one[i] = byte('a' + i%26)
	}
	for len(stream) < 64<<10 || len(stream) < 4*msgLen {
		stream = append(stream, one...)
	}
	stream = stream[:len(stream)/msgLen*msgLen]

	epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		die("epoll_create: %v", err)
	}
	conns := make([]*conn, *nconns)
	byFd := map[int]*conn{}
	for i := range conns {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			die("socket: %v", err)
		}
		for try := 0; ; try++ {
			err = unix.Connect(fd, sa)
			if err == nil {
				break
			}
			if err == unix.EINTR {
				continue
			}
			die("connect %d: %v", i, err)
		}
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		unix.SetNonblock(fd, true)
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			die("epoll_ctl: %v", err)
		}
		conns[i] = &conn{fd: fd}
		byFd[fd] = conns[i]
	}
	stdin := bufio.NewReader(os.Stdin)
	if *handshake {
		fmt.Println("ready")
		if _, err := stdin.ReadString('\n'); err != nil {
			die("handshake: %v", err)
		}
	}

	var (
		buf      = make([]byte, 256<<10)
		events   = make([]unix.EpollEvent, 512)
		inWindow int64 // replies completed before the end of the duration
		total    int64 // every reply, drained ones included
		sent     int64
		end      int64
		stopping bool
	)
	closed := *rate <= 0
	done := func(c *conn, at int64) {
		t := now()
		total++
		if t <= end {
			inWindow++
			lat.RecordValue(t - at)
		}
		if closed && !stopping {
			c.send(now())
			sent++
		}
	}
	start = time.Now()
	end = int64(*dur)
	interval := 0.0
	var next int64
	if closed {
		for _, c := range conns {
			c.send(0)
			sent++
		}
	} else {
		interval = 1e9 / *rate
	}
	deadline := end + int64(*drain)
	for {
		t := now()
		if t >= end && !stopping {
			stopping = true
		}
		if stopping && (total == sent || t >= deadline) {
			break
		}
		timeout := 100
		if !closed && !stopping {
			for next <= t {
				c := conns[sent%int64(len(conns))]
				sendLag.RecordValue(t - next + 1)
				c.send(next)
				sent++
				next = int64(float64(sent) * interval)
				if next >= end {
					break
				}
			}
			if wait := next - now(); wait < 2_000_000 {
				timeout = 0
			} else {
				timeout = int(wait/1_000_000) - 1
			}
		}
		n, err := unix.EpollWait(epfd, events, timeout)
		if err != nil && err != unix.EINTR {
			die("epoll_wait: %v", err)
		}
		for i := 0; i < n; i++ {
			c := byFd[int(events[i].Fd)]
			if events[i].Events&unix.EPOLLOUT != 0 {
				c.flush()
			}
			if events[i].Events&(unix.EPOLLIN|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
				c.read(buf, *size, done)
			}
		}
	}
	elapsed := float64(end) / 1e9
	us := func(h *hdr.Histogram, q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1000 }
	out := map[string]any{
		"mode":       map[bool]string{true: "closed", false: "open"}[closed],
		"conns":      *nconns,
		"size":       *size,
		"duration_s": elapsed,
		"rate":       *rate,
		"sent":       sent,
		"messages":   total,
		"in_window":  inWindow,
		"unanswered": sent - total,
		"msgs_per_s": float64(inWindow) / elapsed,
		"p50_us":     us(lat, 50),
		"p99_us":     us(lat, 99),
		"p999_us":    us(lat, 99.9),
		"max_us":     float64(lat.Max()) / 1000,
		"mean_us":    lat.Mean() / 1000,
	}
	if !closed {
		out["send_lag_p50_us"] = us(sendLag, 50)
		out["send_lag_p99_us"] = us(sendLag, 99)
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	if *handshake {
		stdin.ReadString('\n')
	}
	for _, c := range conns {
		unix.Close(c.fd)
	}
}
