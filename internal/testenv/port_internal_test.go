package testenv

import "testing"

// TestFreePortIsReserved: a port freePort handed out stays reserved, so a
// second reservation of it (another test process, or this one) is refused
// while the server that got it may be stopped for a restart.
func TestFreePortIsReserved(t *testing.T) {
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	ok, err := reservePort(port)
	if err != nil || ok {
		t.Fatalf("reservePort(%d) again = %v, %v; want refused", port, ok, err)
	}
}
