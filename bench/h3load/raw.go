package main

// The lean load loop: each request is a bidirectional QUIC stream carrying one HEADERS
// frame encoded once up front, and the response is read to its end and checked frame by
// frame (status 200, DATA bytes counted). quic-go's http.Client path allocates a request,
// a response, header maps and a goroutine hand-off per request, which made the client, not
// the server, the limit: ringx-h3's zone then woke for about every fourth datagram. h2load, the h2 client in the same benchmark, is as lean as this.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/quicvarint"
)

// HTTP/3 frame and stream types (RFC 9114 §7.2, §6.2).
const (
	frameData     = 0x00
	frameHeaders  = 0x01
	frameSettings = 0x04
	streamControl = 0x00
)

// rawConn is one HTTP/3 connection without net/http: the client's control stream sent
// (SETTINGS, no QPACK dynamic table, so responses use only the static table and literals)
// and the server's unidirectional streams read and discarded.
type rawConn struct {
	conn *quic.Conn
	req  []byte
}

func dialRaw(target string) (*rawConn, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, u.Host, tlsConfig(), quicConfig())
	if err != nil {
		return nil, err
	}
	ctrl, err := conn.OpenUniStream()
	if err != nil {
		return nil, err
	}
	// The control stream stays open for the connection's life (RFC 9114 §6.2.1).
	if _, err := ctrl.Write([]byte{streamControl, frameSettings, 0}); err != nil {
		return nil, err
	}
	go func() {
		for {
			s, err := conn.AcceptUniStream(context.Background())
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, s) }()
		}
	}()
	// The fields quic-go's http3 client sends for a GET, in its order.
	var block bytes.Buffer
	enc := qpack.NewEncoder(&block)
	path := u.RequestURI()
	for _, f := range [][2]string{{":authority", u.Host}, {":method", "GET"}, {":path", path},
		{":scheme", "https"}, {"accept-encoding", "gzip"}, {"user-agent", "quic-go HTTP/3"}} {
		if err := enc.WriteField(qpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			return nil, err
		}
	}
	req := quicvarint.Append(nil, frameHeaders)
	req = quicvarint.Append(req, uint64(block.Len()))
	return &rawConn{conn: conn, req: append(req, block.Bytes()...)}, nil
}

// get makes one request and returns the response body's length.
func (c *rawConn) get(buf *[]byte) (int64, error) {
	s, err := c.send()
	if err != nil {
		return 0, err
	}
	return readResponse(s, buf)
}

// send opens a stream and writes the request on it, ending the stream's sending side.
func (c *rawConn) send() (*quic.Stream, error) {
	s, err := c.conn.OpenStreamSync(context.Background())
	if err != nil {
		return nil, err
	}
	if _, err := s.Write(c.req); err != nil {
		return nil, err
	}
	if err := s.Close(); err != nil {
		return nil, err
	}
	return s, nil
}

// readResponse reads stream s to its end into buf and checks the response in it.
func readResponse(s *quic.Stream, buf *[]byte) (int64, error) {
	b := (*buf)[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := s.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	*buf = b
	return parseResponse(b)
}

// batched keeps m requests in flight on c in h2load's shape until stop: one writer sends,
// back to back, the requests of every response completed since it last ran, so that they
// share packets as h2load's share a write; m readers read the responses. record is given
// each request's start, body length and error.
func (c *rawConn) batched(m int, stop *atomic.Bool, record func(time.Time, int64, error)) {
	type sent struct {
		s  *quic.Stream
		t0 time.Time
	}
	done := make(chan struct{}, m)
	inflight := make(chan sent, m)
	var readers sync.WaitGroup
	for j := 0; j < m; j++ {
		done <- struct{}{}
		readers.Add(1)
		go func() {
			defer readers.Done()
			buf := make([]byte, 0, 4096)
			for r := range inflight {
				n, err := readResponse(r.s, &buf)
				record(r.t0, n, err)
				done <- struct{}{}
			}
		}()
	}
	for !stop.Load() {
		<-done
		k := 1
	drain:
		for {
			select {
			case <-done:
				k++
			default:
				break drain
			}
		}
		for ; k > 0; k-- {
			t0 := time.Now()
			s, err := c.send()
			if err != nil {
				record(t0, 0, err)
				done <- struct{}{}
				continue
			}
			inflight <- sent{s, t0}
		}
	}
	close(inflight)
	readers.Wait()
}

// parseResponse checks a response stream's frames: one HEADERS with :status 200 first,
// then DATA (whose bytes are the body) and any frames of unknown type (skipped, §9).
func parseResponse(b []byte) (int64, error) {
	var body int64
	status := ""
	for len(b) > 0 {
		typ, n, err := quicvarint.Parse(b)
		if err != nil {
			return 0, err
		}
		b = b[n:]
		size, n, err := quicvarint.Parse(b)
		if err != nil || uint64(len(b)-n) < size {
			return 0, errors.New("truncated frame")
		}
		payload := b[n : n+int(size)]
		b = b[n+int(size):]
		switch typ {
		case frameHeaders:
			if status != "" {
				continue // trailers
			}
			next := qpack.NewDecoder().Decode(payload)
			for {
				f, err := next()
				if err == io.EOF {
					break
				}
				if err != nil {
					return 0, err
				}
				if f.Name == ":status" {
					status = f.Value
				}
			}
			if status == "" {
				return 0, errors.New("response HEADERS without :status")
			}
		case frameData:
			if status == "" {
				return 0, errors.New("DATA before HEADERS")
			}
			body += int64(size)
		}
	}
	if status != "200" {
		if status == "" {
			return 0, errors.New("no response HEADERS")
		}
		return body, fmt.Errorf("status %s", status)
	}
	return body, nil
}
