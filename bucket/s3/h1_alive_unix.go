//go:build unix

package s3

import "syscall"

// alive reports whether an idle connection can carry a request: the
// server has not closed or reset it, nor sent anything (an answer nobody
// asked for, a TLS alert before closing). It peeks at the socket without
// waiting, as net/http learns the same from the read it keeps pending on
// every idle connection. (A TLS 1.3 server's session tickets come right
// after the handshake and are read with the first answer.)
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
	default:
		return false // reset, closed by the server, or bytes nobody asked for
	}
}
