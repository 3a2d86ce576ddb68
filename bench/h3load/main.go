// h3load: an HTTP/3 load client over quic-go, for bench/h3.py (no load client for HTTP/3
// ships with Debian: its h2load is built without it). `-c` connections each run `-m`
// concurrent streams of back-to-back GET requests for `-d` (after `-warmup`, whose
// requests are not counted); with `-new` every request opens its own connection and closes
// it (handshake cost); with `-post FILE` each request is a POST of the file's bytes (an
// upload). GETs on kept connections go on raw streams (raw.go), the rest through quic-go's
// http.Client. The connections are made before the measured span; with `-marks` its start
// and end are printed as they happen. With `-rps N` each connection starts at most N requests
// a second, as h2load's --rps does. With `-proto h2` or `-proto h1` the requests go over
// TLS on TCP through Go's net/http instead, the same TLS stack as quic-go's: what a new
// connection per request costs the server over h2 or HTTPS, which h2load cannot measure
// (it keeps its connections). Prints one JSON object last: requests done,
// succeeded, failed, response body bytes, request body bytes sent, requests per second and
// latency percentiles in milliseconds.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

type result struct {
	Requests  int64   `json:"requests"`
	Succeeded int64   `json:"succeeded"`
	Failed    int64   `json:"failed"`
	Bytes     int64   `json:"bytes"`
	Sent      int64   `json:"sent"`
	Seconds   float64 `json:"seconds"`
	RPS       float64 `json:"rps"`
	P50Ms     float64 `json:"lat_p50_ms"`
	P99Ms     float64 `json:"lat_p99_ms"`
	FirstErr  string  `json:"first_error,omitempty"`
}

var ca = flag.String("ca", "", "verify the server against this CA (PEM)")

var post = flag.String("post", "", "POST this file's bytes to each URL instead of a GET")

// sni: the TLS server name sent (Go sends none for an IP address, and a server that picks
// its certificate by name may then have none to offer).
var sni = flag.String("sni", "", "the TLS server name to send")

// fields is a repeatable flag: `-H "Name: value"`.
type fields []string

func (f *fields) String() string     { return strings.Join(*f, ", ") }
func (f *fields) Set(v string) error { *f = append(*f, v); return nil }

var header fields

// marks: the connections are made before the measured span (a server slow to shake hands,
// Caddy took 0.8 s for ten, would otherwise be charged for them without a request counted).
var marks = flag.Bool("marks", false, "print `counting` and `counted` lines when the measured span starts and ends")

// proto: "h3" over quic-go, or "h2"/"h1" over TLS on TCP (net/http; no raw path).
var proto = flag.String("proto", "h3", "h3, or h2 or h1 over TLS on TCP")

var nethttp = flag.Bool("nethttp", false, "GETs through quic-go's http.Client, not the lean loop (raw.go)")

// tlsConfig: the server verified against -ca if given, else not at all; ALPN offers -proto.
func tlsConfig() *tls.Config {
	var roots *x509.CertPool
	if *ca != "" {
		pem, err := os.ReadFile(*ca)
		if err != nil {
			fmt.Fprintln(os.Stderr, "h3load:", err)
			os.Exit(2)
		}
		roots = x509.NewCertPool()
		roots.AppendCertsFromPEM(pem)
	}
	return &tls.Config{
		InsecureSkipVerify: roots == nil,
		RootCAs:            roots,
		NextProtos:         []string{map[string]string{"h3": "h3", "h2": "h2", "h1": "http/1.1"}[*proto]},
		ServerName:         *sni,
	}
}

// quicConfig: what every connection of either path is dialled with.
func quicConfig() *quic.Config {
	return &quic.Config{MaxIdleTimeout: 30 * time.Second}
}

// roundTripper: a transport for -proto and what closes its connections.
func roundTripper() (http.RoundTripper, func()) {
	if *proto == "h3" {
		t := &http3.Transport{TLSClientConfig: tlsConfig(), QUICConfig: quicConfig()}
		return t, func() { t.Close() }
	}
	t := &http.Transport{TLSClientConfig: tlsConfig(), ForceAttemptHTTP2: *proto == "h2",
		MaxIdleConnsPerHost: 1024}
	if *proto == "h1" {
		// A non-nil empty map turns net/http's HTTP/2 off.
		t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return t, t.CloseIdleConnections
}

func main() {
	url := flag.String("url", "", "the URL to GET (https://...)")
	conns := flag.Int("c", 1, "connections")
	streams := flag.Int("m", 1, "concurrent streams per connection")
	dur := flag.Duration("d", 5*time.Second, "how long to measure")
	warm := flag.Duration("warmup", time.Second, "load before measuring, not counted")
	fresh := flag.Bool("new", false, "a new connection for every request")
	batch := flag.Bool("batch", false, "GETs in h2load's shape: each connection's requests sent together as responses complete (raw.go)")
	rps := flag.Int("rps", 0, "at most this many requests a second per connection, as h2load's --rps (0: no limit; not with -batch)")
	get1 := flag.Bool("get", false, "fetch the URLs given as arguments once (see fetch)")
	out := flag.String("out", ".", "with -get: where the bodies go")
	flag.Var(&header, "H", "with -get: a request header field `Name: value` (repeatable)")
	flag.Parse()
	if *get1 {
		os.Exit(fetch(flag.Args(), *out))
	}
	if *url == "" {
		fmt.Fprintln(os.Stderr, "h3load: -url is required")
		os.Exit(2)
	}
	if *proto != "h3" && *proto != "h2" && *proto != "h1" {
		fmt.Fprintln(os.Stderr, "h3load: -proto takes h3, h2 or h1")
		os.Exit(2)
	}
	if *rps < 0 || (*rps > 0 && *batch) {
		fmt.Fprintln(os.Stderr, "h3load: -rps takes a positive rate, and not with -batch")
		os.Exit(2)
	}
	var (
		counting atomic.Bool
		stop     atomic.Bool
		res      result
		mu       sync.Mutex
		lat      []time.Duration
		firstErr atomic.Value
		wg       sync.WaitGroup
	)
	var upload []byte
	if *post != "" {
		var err error
		if upload, err = os.ReadFile(*post); err != nil {
			fmt.Fprintln(os.Stderr, "h3load:", err)
			os.Exit(2)
		}
	}
	// viaHTTP: one request through quic-go's http.Client; the body's length.
	viaHTTP := func(c *http.Client) (int64, error) {
		var resp *http.Response
		var err error
		if upload != nil {
			resp, err = c.Post(*url, "application/octet-stream", bytes.NewReader(upload))
		} else {
			resp, err = c.Get(*url)
		}
		var n int64
		if err == nil {
			n, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
			if want := map[string]int{"h3": 3, "h2": 2, "h1": 1}[*proto]; err == nil && resp.ProtoMajor != want {
				err = fmt.Errorf("answered over %s, not %s", resp.Proto, *proto)
			}
		}
		return n, err
	}
	// record counts a request started at t0 that got n body bytes or err.
	record := func(t0 time.Time, n int64, err error) {
		if !counting.Load() {
			return
		}
		d := time.Since(t0)
		atomic.AddInt64(&res.Requests, 1)
		if err != nil {
			atomic.AddInt64(&res.Failed, 1)
			firstErr.CompareAndSwap(nil, err.Error())
			return
		}
		atomic.AddInt64(&res.Succeeded, 1)
		atomic.AddInt64(&res.Bytes, n)
		atomic.AddInt64(&res.Sent, int64(len(upload)))
		mu.Lock()
		lat = append(lat, d)
		mu.Unlock()
	}
	// get makes one request with `do`, which may keep the response in `buf`.
	get := func(do func(buf *[]byte) (int64, error), buf *[]byte) {
		t0 := time.Now()
		n, err := do(buf)
		record(t0, n, err)
	}
	// HTTP/3 GETs on kept connections take the lean path (raw.go) unless -nethttp; uploads,
	// a connection per request and TCP go through an http.Client.
	raw := upload == nil && !*fresh && !*nethttp && *proto == "h3"
	for i := 0; i < *conns; i++ {
		var do func(buf *[]byte) (int64, error)
		if raw {
			c, err := dialRaw(*url)
			if err != nil {
				fmt.Fprintln(os.Stderr, "h3load:", err)
				os.Exit(1)
			}
			defer c.conn.CloseWithError(0, "")
			if *batch {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c.batched(*streams, &stop, record)
				}()
				continue
			}
			do = c.get
		} else {
			tr, closeAll := roundTripper()
			shared := &http.Client{Transport: tr}
			defer closeAll()
			do = func(*[]byte) (int64, error) {
				if !*fresh {
					return viaHTTP(shared)
				}
				t, closeIt := roundTripper()
				defer closeIt()
				return viaHTTP(&http.Client{Transport: t})
			}
		}
		// With -rps, a request waits for its connection's turn: a turn comes every 1/rps s,
		// and turns that come while every stream is busy wait for one (as many as it has
		// streams), as h2load's pending requests do.
		var turns chan struct{}
		if *rps > 0 {
			turns = make(chan struct{}, *streams)
			wg.Add(1)
			go func() {
				defer wg.Done()
				t := time.NewTicker(time.Second / time.Duration(*rps))
				defer t.Stop()
				for range t.C {
					if stop.Load() {
						close(turns)
						return
					}
					select {
					case turns <- struct{}{}:
					default:
					}
				}
			}()
		}
		for j := 0; j < *streams; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 0, 4096)
				for !stop.Load() {
					if turns != nil {
						if _, ok := <-turns; !ok {
							return
						}
					}
					get(do, &buf)
				}
			}()
		}
	}
	time.Sleep(*warm)
	if *marks {
		fmt.Println("counting")
	}
	counting.Store(true)
	start := time.Now()
	time.Sleep(*dur)
	counting.Store(false)
	res.Seconds = time.Since(start).Seconds()
	if *marks {
		fmt.Println("counted")
	}
	stop.Store(true)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case <-done:
	case <-ctx.Done():
	}
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	pct := func(q float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		i := int(q * float64(len(lat)))
		if i >= len(lat) {
			i = len(lat) - 1
		}
		return float64(lat[i].Microseconds()) / 1000
	}
	res.RPS = float64(res.Succeeded) / res.Seconds
	res.P50Ms, res.P99Ms = pct(0.5), pct(0.99)
	if e, ok := firstErr.Load().(string); ok {
		res.FirstErr = e
	}
	_ = json.NewEncoder(os.Stdout).Encode(res)
}

// fetch GETs `urls` at once on one connection (POSTs with -post), with the `-H` header
// fields; each body goes to a file named by its URL's index under `out`, and a JSON line per
// URL gives its status, body size and response header fields. The exit status is 1 if any
// failed.
func fetch(urls []string, out string) int {
	tr, closeAll := roundTripper()
	defer closeAll()
	// A redirect is an answer to check, not one to follow.
	c := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	type got struct {
		URL     string            `json:"url"`
		Status  int               `json:"status"`
		Bytes   int64             `json:"bytes"`
		Headers map[string]string `json:"headers,omitempty"`
		Error   string            `json:"error,omitempty"`
	}
	res := make([]got, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i].URL = u
			var resp *http.Response
			var req *http.Request
			var err error
			if *post != "" {
				var body []byte
				if body, err = os.ReadFile(*post); err == nil {
					req, err = http.NewRequest("POST", u, bytes.NewReader(body))
				}
			} else {
				req, err = http.NewRequest("GET", u, nil)
			}
			if err == nil {
				for _, f := range header {
					name, value, _ := strings.Cut(f, ":")
					req.Header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
				}
				resp, err = c.Do(req)
			}
			if err == nil {
				res[i].Headers = map[string]string{}
				for name := range resp.Header {
					res[i].Headers[strings.ToLower(name)] = resp.Header.Get(name)
				}
				var f *os.File
				if f, err = os.Create(filepath.Join(out, fmt.Sprint(i))); err == nil {
					res[i].Bytes, err = io.Copy(f, resp.Body)
					f.Close()
				}
				resp.Body.Close()
				res[i].Status = resp.StatusCode
			}
			if err != nil {
				res[i].Error = err.Error()
			}
		}()
	}
	wg.Wait()
	status := 0
	enc := json.NewEncoder(os.Stdout)
	for _, r := range res {
		_ = enc.Encode(r)
		if r.Error != "" {
			status = 1
		}
	}
	return status
}
