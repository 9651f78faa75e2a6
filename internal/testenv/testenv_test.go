package testenv_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/claimd/claimd/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// migrate creates the table every cloned database must contain.
func migrate(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE TABLE marker (id int PRIMARY KEY)`)
	return err
}

// pingRedis and pingPostgres are one short-lived round trip each, so a
// stopped server shows up as an error rather than a hang.
func pingRedis(ctx context.Context, url string) error {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	opts.MaxRetries = -1
	c := redis.NewClient(opts)
	defer c.Close()
	return c.Ping(ctx).Err()
}

func pingPostgres(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestSharedRedisAnswersPing(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	url := testenv.Redis(t)
	if err := pingRedis(ctx, url); err != nil {
		t.Fatalf("PING %s: %v", url, err)
	}
	if again := testenv.Redis(t); again != url {
		t.Errorf("second Redis() = %q, want the shared %q", again, url)
	}
}

func TestPostgresGivesEachCallItsOwnMigratedDatabase(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	urls := []string{testenv.Postgres(t, migrate), testenv.Postgres(t, migrate)}
	names := map[string]bool{}
	for i, url := range urls {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatalf("connect %s: %v", url, err)
		}
		defer conn.Close(ctx)
		var db string
		if err := conn.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
			t.Fatalf("current_database(): %v", err)
		}
		names[db] = true
		// A row written in one database must not appear in the other.
		if _, err := conn.Exec(ctx, `INSERT INTO marker VALUES ($1)`, i); err != nil {
			t.Fatalf("INSERT INTO marker in %s: %v", db, err)
		}
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM marker`).Scan(&n); err != nil {
			t.Fatalf("count marker in %s: %v", db, err)
		}
		if n != 1 {
			t.Errorf("marker rows in %s = %d, want 1", db, n)
		}
	}
	if len(names) != 2 {
		t.Errorf("Postgres() twice gave databases %v, want two distinct", names)
	}
}

func TestPostgresDropsDatabaseAtCleanup(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	var url string
	t.Run("user", func(t *testing.T) { url = testenv.Postgres(t, migrate) })
	if err := pingPostgres(ctx, url); err == nil {
		t.Errorf("connect %s after its test ended: want an error (database dropped)", url)
	}
}

// restartable is a private server together with its readiness check.
type restartable struct {
	desc  string
	start func(t *testing.T) *testenv.Server
	ping  func(ctx context.Context, url string) error
}

func TestPrivateServerStopAndStart(t *testing.T) {
	t.Parallel()
	tests := []restartable{
		{
			desc:  "redis",
			start: func(t *testing.T) *testenv.Server { return testenv.StartRedis(t) },
			ping:  pingRedis,
		},
		{
			desc:  "postgres",
			start: func(t *testing.T) *testenv.Server { return testenv.StartPostgres(t, migrate) },
			ping: func(ctx context.Context, url string) error {
				conn, err := pgx.Connect(ctx, url)
				if err != nil {
					return err
				}
				defer conn.Close(ctx)
				_, err = conn.Exec(ctx, `SELECT count(*) FROM marker`)
				return err
			},
		},
		{
			desc: "durable postgres",
			start: func(t *testing.T) *testenv.Server {
				return testenv.StartPostgresWith(t, testenv.Options{Durable: true}, nil)
			},
			ping: pingPostgres,
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			s := tc.start(t)
			url := s.URL()
			if err := tc.ping(ctx, url); err != nil {
				t.Fatalf("%s before Stop: %v", url, err)
			}
			s.Stop(t)
			if err := tc.ping(ctx, url); err == nil {
				t.Fatalf("%s after Stop: want an error, got none", url)
			}
			s.Start(t)
			if s.URL() != url {
				t.Errorf("URL() after Start = %q, want %q", s.URL(), url)
			}
			if err := tc.ping(ctx, url); err != nil {
				t.Fatalf("%s after Start: %v", url, err)
			}
		})
	}
}

func TestCrashAndRestart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc  string
		start func(t *testing.T) *testenv.Server
		sig   syscall.Signal
		ping  func(ctx context.Context, url string) error
	}{
		{desc: "redis kill -9", start: func(t *testing.T) *testenv.Server { return testenv.StartRedis(t) }, sig: syscall.SIGKILL, ping: pingRedis},
		{
			desc: "postgres immediate shutdown keeps committed rows",
			start: func(t *testing.T) *testenv.Server {
				return testenv.StartPostgresWith(t, testenv.Options{Durable: true}, migrate)
			},
			sig: syscall.SIGQUIT,
			ping: func(ctx context.Context, url string) error {
				conn, err := pgx.Connect(ctx, url)
				if err != nil {
					return err
				}
				defer conn.Close(ctx)
				var n int
				if err := conn.QueryRow(ctx, `SELECT count(*) FROM marker`).Scan(&n); err != nil {
					return err
				}
				if n != 1 {
					return fmt.Errorf("marker rows = %d, want 1", n)
				}
				return nil
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			s := tc.start(t)
			if strings.HasPrefix(s.URL(), "postgres") {
				if err := withConn(ctx, s.URL(), `INSERT INTO marker VALUES (1)`); err != nil {
					t.Fatal(err)
				}
			}
			if err := tc.ping(ctx, s.URL()); err != nil {
				t.Fatalf("%s before Crash: %v", s.URL(), err)
			}
			if err := s.Crash(tc.sig); err != nil {
				t.Fatalf("Crash(%v): %v", tc.sig, err)
			}
			if err := tc.ping(ctx, s.URL()); err == nil {
				t.Fatalf("%s after Crash: want an error, got none", s.URL())
			}
			if err := s.Restart(); err != nil {
				t.Fatalf("Restart: %v", err)
			}
			if err := tc.ping(ctx, s.URL()); err != nil {
				t.Fatalf("%s after Restart: %v", s.URL(), err)
			}
		})
	}
}

// withConn runs one statement on a new connection to url.
func withConn(ctx context.Context, url, sql string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func TestServersForTools(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, err := testenv.StartServers("", testenv.Options{})
	if err != nil {
		t.Fatalf("StartServers: %v", err)
	}
	if err := pingRedis(ctx, s.Redis.URL()); err != nil {
		t.Errorf("PING %s: %v", s.Redis.URL(), err)
	}
	if err := pingPostgres(ctx, s.Postgres.URL()); err != nil {
		t.Errorf("connect %s: %v", s.Postgres.URL(), err)
	}
	dirs := []string{s.Redis.Dir(), s.Postgres.Dir()}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("Stat(%s) after Close = %v, want not exist", d, err)
		}
	}
	if err := pingRedis(ctx, s.Redis.URL()); err == nil {
		t.Errorf("PING %s after Close: want an error", s.Redis.URL())
	}
}

// TestServerOutlivesTheThreadThatStartedIt: a server started from a
// goroutine that returns while locked to its thread (so the thread ends, as
// in cmd/claimd's network-namespace tests) keeps running; Pdeathsig fires
// when the forking thread exits, so testenv forks from a thread that never
// does.
func TestServerOutlivesTheThreadThatStartedIt(t *testing.T) {
	type started struct {
		s      *testenv.Server
		tid    int
		err    error
		onMain bool
	}
	res := make(chan started, 1)
	release := make(chan struct{})
	defer close(release)
	var got started
	for attempt := 0; ; attempt++ {
		if attempt == 20 {
			t.Fatal("20 goroutines in a row ran on the main thread")
		}
		go func() {
			runtime.LockOSThread() // never unlocked below: the thread ends with this goroutine
			if syscall.Gettid() == os.Getpid() {
				// The main thread never ends: hold it for the rest of the
				// test, so that the next goroutine runs on another.
				res <- started{onMain: true}
				<-release
				runtime.UnlockOSThread()
				return
			}
			s, err := testenv.StartRedisProcess(t.TempDir())
			res <- started{s: s, tid: syscall.Gettid(), err: err}
		}()
		if got = <-res; !got.onMain {
			break
		}
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer got.s.Close()
	// Wait (bounded) until the kernel has ended that thread, then ask the server.
	task := fmt.Sprintf("/proc/self/task/%d", got.tid)
	for deadline := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d still runs after 10s", got.tid)
		}
	}
	opt, err := redis.ParseURL(got.s.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("the server died with the thread that started it: %v", err)
	}
}
