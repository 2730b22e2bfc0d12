package s3

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// h1Client is the lean PUT's HTTP/1.1 client: a pool of keep-alive
// connections to one endpoint, on which a request is written with one
// system call (its head and body together) and its answer read by the
// calling goroutine. net/http's Transport hands every request to a
// writing goroutine and the answer to a reading one per connection, three
// goroutines and several hand-offs per request, which on a node sending
// two PUTs per replicated firing cost more CPU than building and signing
// them.
//
// What it keeps of net/http's behaviour: a connection goes back to the
// pool only after its answer was read in full, without Connection: close,
// and is closed when the pool is full or it sat idle for the idle timeout;
// a request that fails on a reused connection before a byte of it was
// written is sent once more on a new one (a PUT is not replayed once
// written: its retry is the retryer's, counted as an attempt); a
// connection the server closed while idle is found before it is used
// (see alive) and not sent on; each attempt is bounded by a deadline on
// the connection, and a context that ends cuts the connection's deadline
// short. Redirects and proxies are left to net/http (see leanPut).
type h1Client struct {
	addr        string      // host:port to dial
	tlsConfig   *tls.Config // nil: plain TCP
	dialTimeout time.Duration
	idleTimeout time.Duration
	maxIdle     int

	mu    sync.Mutex
	idle  []*h1Conn   // most recently used last
	timer *time.Timer // closes what stays idle past the idle timeout; nil when idle is empty
}

// h1Conn is one connection of the pool.
type h1Conn struct {
	conn      net.Conn
	raw       syscall.RawConn // the TCP socket, for the liveness check (nil: none)
	tls       bool
	br        *bufio.Reader
	idleSince time.Time

	// The liveness check's (alive) state.
	peek    func(fd uintptr) bool
	peekN   int
	peekErr error
	peekBuf [1]byte
}

// errNothingWritten marks a failure before any byte of the request left.
type errNothingWritten struct{ err error }

func (e errNothingWritten) Error() string { return e.err.Error() }
func (e errNothingWritten) Unwrap() error { return e.err }

// redirected: the store answered 307 or 308 with a Location; the attempt
// goes there through net/http, which follows any further redirect.
type redirected struct{ location string }

func (r *redirected) Error() string { return "redirected to " + r.location }

// get returns an idle connection that is still open (reused true), or a
// new one.
func (c *h1Client) get(ctx context.Context, deadline time.Time) (*h1Conn, bool, error) {
	now := time.Now()
	c.mu.Lock()
	for n := len(c.idle); n > 0; n = len(c.idle) {
		pc := c.idle[n-1]
		c.idle[n-1] = nil
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		if now.Sub(pc.idleSince) < c.idleTimeout && pc.alive() {
			return pc, true, nil
		}
		_ = pc.conn.Close()
		c.mu.Lock()
	}
	c.mu.Unlock()
	pc, err := c.dial(ctx, deadline)
	return pc, false, err
}

func (c *h1Client) dial(ctx context.Context, deadline time.Time) (*h1Conn, error) {
	d := net.Dialer{Timeout: c.dialTimeout, Deadline: deadline, KeepAlive: 30 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, errNothingWritten{err}
	}
	pc := &h1Conn{conn: conn}
	if sc, ok := conn.(syscall.Conn); ok {
		pc.raw, _ = sc.SyscallConn()
	}
	if c.tlsConfig != nil {
		tc := tls.Client(conn, c.tlsConfig)
		_ = conn.SetDeadline(deadline)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return nil, errNothingWritten{fmt.Errorf("TLS handshake with %s: %w", c.addr, err)}
		}
		pc.conn, pc.tls = tc, true
	}
	pc.br = bufio.NewReaderSize(pc.conn, 4<<10)
	return pc, nil
}

// release returns pc to the pool, closing it if the pool is full, and
// closes the connections idle for longer than the idle timeout.
func (c *h1Client) release(pc *h1Conn) {
	pc.idleSince = time.Now()
	var stale []*h1Conn
	c.mu.Lock()
	n := 0
	for n < len(c.idle) && pc.idleSince.Sub(c.idle[n].idleSince) >= c.idleTimeout {
		n++
	}
	if n > 0 {
		stale = append(stale, c.idle[:n]...)
		m := copy(c.idle, c.idle[n:])
		clear(c.idle[m:])
		c.idle = c.idle[:m]
	}
	if len(c.idle) < c.maxIdle {
		c.idle = append(c.idle, pc)
		pc = nil
		if c.timer == nil {
			c.timer = time.AfterFunc(c.idleTimeout, c.expire)
		}
	}
	c.mu.Unlock()
	if pc != nil {
		stale = append(stale, pc)
	}
	for _, s := range stale {
		_ = s.conn.Close()
	}
}

// expire closes the connections idle for the idle timeout and waits for
// the next to be, as long as any is idle: a client nobody uses keeps no
// connection open past the timeout (net/http's Transport has a timer for
// each idle connection to the same end).
func (c *h1Client) expire() {
	now := time.Now()
	var stale []*h1Conn
	c.mu.Lock()
	n := 0
	for n < len(c.idle) && now.Sub(c.idle[n].idleSince) >= c.idleTimeout {
		n++
	}
	stale = append(stale, c.idle[:n]...)
	m := copy(c.idle, c.idle[n:])
	clear(c.idle[m:])
	c.idle = c.idle[:m]
	if len(c.idle) > 0 {
		c.timer = time.AfterFunc(c.idle[0].idleSince.Add(c.idleTimeout).Sub(now), c.expire)
	} else {
		c.timer = nil
	}
	c.mu.Unlock()
	for _, pc := range stale {
		_ = pc.conn.Close()
	}
}

// closeIdle closes every idle connection.
func (c *h1Client) closeIdle() {
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, pc := range idle {
		_ = pc.conn.Close()
	}
}

// putMethod is the request ReadResponse is told the answers are for (a
// PUT's or a POST's: it reads them alike).
var putMethod = &http.Request{Method: http.MethodPut}

// roundTrip writes head and body (a complete HTTP/1.1 request) on a
// pooled connection by deadline and hands the answer to read: a 2xx one
// as an okAnswer (its body read), any other as an *http.Response whose
// body read must read to the end (or return false: the connection is then
// closed). A failure on a reused connection before anything was written
// is tried once more on a new connection. With keepBody, every answer
// comes as an *http.Response (a 2xx one whose body the caller reads).
func (c *h1Client) roundTrip(ctx context.Context, deadline time.Time, head, body []byte, keepBody bool, read func(*okAnswer, *http.Response) bool) error {
	for try := 0; ; try++ {
		pc, reused, err := c.get(ctx, deadline)
		if err != nil {
			return err
		}
		err = c.exchange(ctx, pc, deadline, head, body, keepBody, read)
		var nw errNothingWritten
		if err != nil && reused && try == 0 && errors.As(err, &nw) && ctx.Err() == nil {
			continue
		}
		return err
	}
}

// longAgo, as a deadline, fails every pending read and write at once.
var longAgo = time.Unix(1, 0)

func (c *h1Client) exchange(ctx context.Context, pc *h1Conn, deadline time.Time, head, body []byte, keepBody bool, read func(*okAnswer, *http.Response) bool) error {
	if err := pc.conn.SetDeadline(deadline); err != nil {
		_ = pc.conn.Close()
		return errNothingWritten{err}
	}
	stop := context.AfterFunc(ctx, func() { _ = pc.conn.SetDeadline(longAgo) })
	reuse := false
	defer func() {
		// A connection whose deadline the context cut short is closed.
		if stop() && reuse {
			c.release(pc)
			return
		}
		_ = pc.conn.Close()
	}()

	var n int64
	var err error
	switch {
	case len(body) == 0:
		var w int
		w, err = pc.conn.Write(head)
		n = int64(w)
	case !pc.tls:
		// One writev for head and body; the body is not copied.
		bufs := net.Buffers{head, body}
		n, err = bufs.WriteTo(pc.conn)
	default:
		// Over TLS each Write is a record of its own: one for both when
		// the body is small, which costs a copy.
		if len(body) <= 16<<10 {
			all := append(head, body...)
			var w int
			w, err = pc.conn.Write(all)
			n = int64(w)
		} else {
			bufs := net.Buffers{head, body}
			n, err = bufs.WriteTo(pc.conn)
		}
	}
	if err != nil {
		if n == 0 {
			return errNothingWritten{err}
		}
		return err
	}
	if !keepBody {
		if a, fast, err := readOK(pc.br); fast {
			if err != nil {
				return err
			}
			ok := read(&a, nil)
			reuse = ok && a.reuse && pc.br.Buffered() == 0
			return nil
		}
	}
	var resp *http.Response
	for {
		resp, err = http.ReadResponse(pc.br, putMethod)
		if err != nil {
			return err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		// An informational answer (100 Continue, 103): the real one follows.
	}
	ok := read(nil, resp)
	reuse = ok && !resp.Close && pc.br.Buffered() == 0
	return nil
}

// drain reads body to its end, up to 256 KiB; it reports whether it got
// there (the connection can carry another request).
func drain(body io.Reader) bool {
	n, err := io.Copy(io.Discard, io.LimitReader(body, 256<<10))
	if err != nil {
		return false
	}
	if n == 256<<10 {
		var b [1]byte
		if m, _ := body.Read(b[:]); m > 0 {
			return false
		}
	}
	return true
}

// newH1Client returns the lean client for the endpoint u with tr's TLS
// configuration and idle timeout, or nil when net/http should carry the
// requests: a scheme other than http and https, or a proxy tr would send
// them through.
func newH1Client(u *url.URL, tr *http.Transport, timeout time.Duration, maxIdle int) *h1Client {
	port := u.Port()
	switch u.Scheme {
	case "http":
		if port == "" {
			port = "80"
		}
	case "https":
		if port == "" {
			port = "443"
		}
	default:
		return nil
	}
	if tr.Proxy != nil {
		if p, err := tr.Proxy(&http.Request{Method: http.MethodPut, URL: u}); err != nil || p != nil {
			return nil
		}
	}
	c := &h1Client{
		addr:        net.JoinHostPort(u.Hostname(), port),
		dialTimeout: min(timeout, 10*time.Second),
		idleTimeout: tr.IdleConnTimeout,
		maxIdle:     maxIdle,
	}
	if c.idleTimeout <= 0 {
		c.idleTimeout = 90 * time.Second
	}
	if u.Scheme == "https" {
		cfg := &tls.Config{}
		if tr.TLSClientConfig != nil {
			cfg = tr.TLSClientConfig.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = u.Hostname()
		}
		cfg.NextProtos = nil // HTTP/1.1 only
		c.tlsConfig = cfg
	}
	return c
}

// A 2xx answer to a PUT is a status and a few headers, of which the
// client needs the ETag and what says where the answer ends and whether
// the connection stays open; readOK reads those without building the
// header map (a dozen allocations per answer in net/textproto). Any other
// answer goes through http.ReadResponse, whose *http.Response the error
// keeps.

// errLongLine: a header line past maxHeaderLine.
var errLongLine = errors.New("a header line of the answer is too long")

const maxHeaderLine = 64 << 10

// okAnswer is what readOK takes from a 2xx answer.
type okAnswer struct {
	status int
	etag   string
	reuse  bool // the body was read to its end and the connection stays open
}

// readOK reads a 2xx HTTP/1.1 answer from br if one is next (ok), its
// body included; otherwise it reads nothing and the caller reads the
// answer with http.ReadResponse.
func readOK(br *bufio.Reader) (a okAnswer, ok bool, err error) {
	head, err := br.Peek(len("HTTP/1.1 200 "))
	if err != nil || string(head[:9]) != "HTTP/1.1 " || head[9] != '2' ||
		head[10] < '0' || head[10] > '9' || head[11] < '0' || head[11] > '9' || head[12] != ' ' {
		return a, false, nil
	}
	a.status = 200 + int(head[10]-'0')*10 + int(head[11]-'0')
	if _, err := readLine(br, nil); err != nil { // the status line
		return a, true, err
	}
	length, chunked, closing := int64(-1), false, false
	for {
		var line []byte
		if line, err = readLine(br, nil); err != nil {
			return a, true, err
		}
		if len(line) == 0 {
			break
		}
		name, value, found := bytes.Cut(line, []byte(":"))
		if !found {
			return a, true, fmt.Errorf("malformed header line %q in the answer", line)
		}
		value = bytes.Trim(value, " \t")
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, perr := strconv.ParseInt(string(value), 10, 64)
			if perr != nil || n < 0 || length >= 0 && n != length {
				return a, true, fmt.Errorf("bad Content-Length %q in the answer", value)
			}
			length = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = true
		case bytes.EqualFold(name, []byte("Connection")):
			for _, tok := range bytes.Split(value, []byte(",")) {
				if bytes.EqualFold(bytes.TrimSpace(tok), []byte("close")) {
					closing = true
				}
			}
		case bytes.EqualFold(name, []byte("ETag")):
			if a.etag == "" {
				a.etag = string(value)
			}
		}
	}
	switch {
	case a.status == http.StatusNoContent:
		a.reuse = !closing
	case chunked || length < 0 || length > 256<<10:
		// A body whose end is not simply counted: the connection closes
		// rather than be read through.
	default:
		if _, err := br.Discard(int(length)); err != nil {
			return a, true, err
		}
		a.reuse = !closing
	}
	return a, true, nil
}

// readLine appends the next line of br to buf without its line ending.
func readLine(br *bufio.Reader, buf []byte) ([]byte, error) {
	for {
		part, err := br.ReadSlice('\n')
		if len(buf)+len(part) > maxHeaderLine {
			return nil, errLongLine
		}
		switch err {
		case nil:
			if buf == nil {
				buf = part // the common case: no copy
			} else {
				buf = append(buf, part...)
			}
			buf = buf[:len(buf)-1]
			if n := len(buf); n > 0 && buf[n-1] == '\r' {
				buf = buf[:n-1]
			}
			return buf, nil
		case bufio.ErrBufferFull:
			buf = append(buf, part...)
		default:
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}
