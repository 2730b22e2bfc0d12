//go:build unix

package bucket

import "syscall"

// alive reports whether an idle connection can carry a request: the
// server has not closed or reset it, and (over plain HTTP) sent nothing
// nobody asked for. It peeks at the socket without waiting, as net/http
// learns the same from the read it keeps pending on every idle
// connection. Over TLS, bytes waiting are a record the server may send
// unasked (a session ticket), which the next read consumes.
func (pc *h1Conn) alive() bool {
	if pc.raw == nil {
		return true
	}
	if pc.peek == nil { // made once per connection, not per check
		pc.peek = func(fd uintptr) bool {
			pc.peekN, _, pc.peekErr = syscall.Recvfrom(int(fd), pc.peekBuf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			return true
		}
	}
	if err := pc.raw.Read(pc.peek); err != nil {
		return false
	}
	switch err := pc.peekErr; {
	case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
		return true // nothing to read: open and idle
	case err != nil, pc.peekN == 0:
		return false // reset, or closed by the server
	default:
		return pc.tls
	}
}
