// Command stripe-receiver is a Stripe webhook receiver that appends one
// ledger row per event, exactly once, because every delivery goes through
// claimd's guard first. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/claimd/claimd/clients/go/claimd"
)

// defaultListen is the receiver's address unless --listen says otherwise:
// beside `make run`, whose claimd holds 127.0.0.1:50051 (gRPC) and
// 127.0.0.1:8080 (HTTP), so neither of those.
const defaultListen = "127.0.0.1:8000"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "stripe-receiver:", err)
		os.Exit(1)
	}
}

// run parses args, serves until ctx ends and then drains. listening, when
// not nil, is told the bound address (tests listen on port 0).
func run(ctx context.Context, args []string, stderr io.Writer, listening func(net.Addr)) error {
	fs := flag.NewFlagSet("stripe-receiver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", defaultListen, "HTTP listen address")
	target := fs.String("claimd", "127.0.0.1:50051", "claimd gRPC address")
	ledgerPath := fs.String("ledger", "ledger.db", "SQLite file of the ledger (created if missing)")
	namespace := fs.String("namespace", "billing", "claimd namespace of this service")
	secret := fs.String("stripe-secret", os.Getenv("STRIPE_WEBHOOK_SECRET"), "Stripe endpoint secret (whsec_...); empty skips signature checks")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))

	l, err := openLedger(ctx, *ledgerPath)
	if err != nil {
		return err
	}
	defer l.Close()
	c, err := claimd.Dial(ctx, *target, claimd.WithLogger(log))
	if err != nil {
		return fmt.Errorf("%w (is claimd running? `make run` starts it on 127.0.0.1:50051)", err)
	}
	defer c.Close()
	if *secret == "" {
		log.Warn("no --stripe-secret: deliveries are not verified (local testing only)")
	}

	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/stripe", &receiver{claimd: c, ledger: l, namespace: *namespace, secret: *secret, log: log, now: time.Now})
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	log.Info("stripe-receiver listening", "addr", lis.Addr().String(), "claimd", *target, "ledger", *ledgerPath)
	if listening != nil {
		listening(lis.Addr())
	}

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
