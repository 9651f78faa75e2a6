//go:build !unix

package postgres

import "net"

// farewellPending cannot peek at a socket here: the generation check and
// pgxpool's ping of idle connections are all there is.
func farewellPending(net.Conn) bool { return false }
