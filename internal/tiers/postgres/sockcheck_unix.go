//go:build unix

package postgres

import (
	"net"
	"syscall"
)

// farewellPending reports whether the server already closed c or wrote to
// it unasked: between statements a live PostgreSQL session sends nothing,
// so a byte waiting is its farewell (57P01 when the server stops or the
// backend is terminated) and end of file its close. It peeks without
// waiting and consumes nothing (as go-redis checks its pooled
// connections), under RawConn.Control rather than Read: pgconn may have a
// background reader parked in a read of c, which holds the read lock until
// data comes (and then the peek sees what it left, the end of file). A
// connection that is not a plain socket (TLS, whose records may hold what
// the session layer sent) is not checked: false.
func farewellPending(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	closed := false
	if err := raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = n > 0 || (n == 0 && err == nil) || (err != nil && err != syscall.EAGAIN && err != syscall.EWOULDBLOCK)
	}); err != nil {
		return true
	}
	return closed
}
