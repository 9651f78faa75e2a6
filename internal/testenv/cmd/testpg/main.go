// Command testpg runs a real PostgreSQL for the test suites of claimd's
// non-Go clients, whose guards write effect fences into a handler's own
// database (clients/GUARD.md, "Exactly-once effects"). It starts the server
// with internal/testenv (a temp directory, a free loopback port, an
// unprivileged user when run as root), prints the database's URL as one line
// on standard output once the server answers, and stops it and removes its
// directory when standard input closes or on SIGINT/SIGTERM:
//
//	coproc PG { testpg; }
//	read -r url <&"${PG[0]}"
//
// so a test script that dies takes the server with it.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/claimd/claimd/internal/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testpg:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := testenv.StartPostgresProcess("", testenv.Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := fmt.Println(s.URL()); err != nil {
		return err
	}
	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	select {
	case <-ctx.Done():
	case <-stdinClosed:
	}
	return s.Close()
}
