package claimd_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/claimd/claimd/clients/go/claimd"
	"github.com/claimd/claimd/clients/go/claimdtest"
)

// binary is claimd built once for this test binary; shared is one server
// for every test that does not stop it. Tests isolate themselves by event id.
var (
	binary string
	shared *claimdtest.Server
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "claimd-go-client")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	toolsDir = dir
	if binary, err = claimdtest.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if shared, err = claimdtest.Start(binary, filepath.Join(dir, "data")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if err := stopPostgres(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if err := shared.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	return code
}

const namespace = "gotest"

var quiet = slog.New(slog.DiscardHandler)

// fastRetry keeps calls to a dead claimd short.
var fastRetry = claimd.RetryPolicy{MaxAttempts: 3, BaseBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, MaxElapsed: 2 * time.Second}

// dial connects to addr and closes the client when the test ends.
func dial(t *testing.T, addr string, opts ...claimd.Option) *claimd.Client {
	t.Helper()
	opts = append([]claimd.Option{claimd.WithLogger(quiet), claimd.WithRetry(fastRetry)}, opts...)
	c, err := claimd.Dial(context.Background(), addr, opts...)
	if err != nil {
		t.Fatalf("Dial(%s) = %v\n%s", addr, err, shared.Logs())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var seq atomic.Int64

// eventID is unique per call across the test binary, so tests sharing one
// server never touch each other's keys.
func eventID(t *testing.T) string {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return fmt.Sprintf("evt_%s_%d_%d", name, time.Now().UnixNano(), seq.Add(1))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// closedPort is a loopback address on which nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
