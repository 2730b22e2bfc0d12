package node

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"regexp"
	"strconv"
)

// ProblemListener wraps the listener the node's API is served on so that
// the requests net/http refuses before any handler sees them (a path with
// a malformed escape such as /v1/actors/t/c/a%zz/alarm, a malformed
// request line or header) are answered like every other error of the API:
// application/problem+json with a code (bad_request), not
// net/http's text/plain. Wrap the listener after TLS (tls.NewListener),
// so that what is rewritten is the plain answer.
func ProblemListener(ln net.Listener) net.Listener { return problemListener{ln} }

type problemListener struct{ net.Listener }

func (l problemListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return problemConn{c}, nil
}

// problemConn rewrites net/http's own error answers, which it writes to
// the connection in one write and then closes it.
type problemConn struct{ net.Conn }

// refusal is how net/http answers a request it could not read
// (net/http.conn.serve): its headers in an order a handler's answer never
// has, Content-Type before Connection.
var refusal = regexp.MustCompile(`^HTTP/1\.1 (4[0-9][0-9]) ([^\r\n]*)\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n([^\r\n]*)$`)

func (c problemConn) Write(b []byte) (int, error) {
	if !bytes.HasPrefix(b, []byte("HTTP/1.1 ")) {
		return c.Conn.Write(b)
	}
	m := refusal.FindSubmatch(b)
	if m == nil {
		return c.Conn.Write(b)
	}
	status, _ := strconv.Atoi(string(m[1]))
	code := CodeBadRequest // the client's request, whatever the 4xx: retrying it cannot help
	detail := "the request could not be read: " + string(m[3])
	body, _ := json.Marshal(Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Code: code})
	body = append(body, '\n')
	var out bytes.Buffer
	out.WriteString("HTTP/1.1 " + string(m[1]) + " " + http.StatusText(status) + "\r\n")
	out.WriteString("Connection: close\r\nContent-Type: application/problem+json\r\nX-Content-Type-Options: nosniff\r\n")
	out.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
	out.Write(body)
	if _, err := c.Conn.Write(out.Bytes()); err != nil {
		return 0, err
	}
	return len(b), nil
}
