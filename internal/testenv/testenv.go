// Package testenv starts the real redis-server and PostgreSQL that claimd's
// tests and benchmarks run against: each in a temporary directory, on a free
// loopback port, stopped by PID. Servers shared by a test binary start once on
// first use and stop in Main; every test gets its own PostgreSQL database,
// cloned from a template migrated once. A missing server binary fails the test
// with the package to install; nothing is ever skipped.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Environment variables naming servers to use instead of starting shared ones.
// The PostgreSQL URL must be a postgres:// URL of a role that may CREATE
// DATABASE; each test binary makes its own template and databases there.
const (
	RedisURLEnv    = "CLAIMD_TEST_REDIS_URL"
	PostgresURLEnv = "CLAIMD_TEST_POSTGRES_URL"
)

// MigrateFunc prepares the database at url, typically by applying migrations.
type MigrateFunc = func(ctx context.Context, url string) error

// migrateTimeout bounds one migrate call and each admin statement.
const migrateTimeout = 2 * time.Minute

// The shared servers of this test binary. Package state is the point here:
// one server per binary, started on first use and stopped by Main.
var (
	redisOnce   sync.Once
	redisServer *Server // nil when RedisURLEnv is used
	redisURL    string
	redisErr    error

	pgOnce     sync.Once
	pgServer   *Server // nil when PostgresURLEnv is used
	pgAdminURL string  // the server's maintenance database, for CREATE/DROP DATABASE
	pgTemplate string  // "" until the template exists
	pgErr      error
	pgSeq      atomic.Int64

	templateMu      sync.Mutex
	templateMigrate MigrateFunc // registered by PostgresTemplate
)

// Main runs the tests of a binary and then stops every shared server this
// package started for it (and drops its template database from an external
// server). Use from TestMain: func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	if err := closeShared(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stopping shared servers: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// closeShared stops the shared servers. It runs after every test has finished,
// so nothing races with the Once-guarded variables.
func closeShared() error {
	var errs []error
	if redisServer != nil {
		errs = append(errs, redisServer.Close())
	}
	if pgServer != nil {
		errs = append(errs, pgServer.Close())
	} else if pgTemplate != "" {
		ctx, cancel := context.WithTimeout(context.Background(), migrateTimeout)
		defer cancel()
		errs = append(errs, exec1(ctx, pgAdminURL, "DROP DATABASE IF EXISTS "+ident(pgTemplate)+" WITH (FORCE)"))
	}
	return errors.Join(errs...)
}

// Redis returns the URL (redis://127.0.0.1:PORT/0) of the Redis server shared
// by this test binary, started on first use without persistence, or the value
// of CLAIMD_TEST_REDIS_URL when set. Tests sharing it must use their own keys.
func Redis(t testing.TB) string {
	t.Helper()
	redisOnce.Do(func() {
		if redisURL = os.Getenv(RedisURLEnv); redisURL != "" {
			return
		}
		redisServer, redisErr = StartRedisProcess("")
		if redisErr == nil {
			redisURL = redisServer.URL()
		}
	})
	if redisErr != nil {
		t.Fatalf("testenv: shared Redis: %v", redisErr)
	}
	return redisURL
}

// PostgresTemplate registers how the template database behind Postgres is
// prepared. Call it before the first Postgres call (in TestMain or init); it
// then takes precedence over the migrate passed to Postgres.
func PostgresTemplate(migrate MigrateFunc) {
	templateMu.Lock()
	defer templateMu.Unlock()
	templateMigrate = migrate
}

// Postgres returns the URL of a new database cloned from this binary's
// migrated template and dropped (WITH (FORCE)) in t.Cleanup, so tests may run
// in parallel. The template is prepared once per binary, by the function
// registered with PostgresTemplate or else by the migrate of the first call;
// later calls' migrate is ignored. The server is the binary's shared one
// (fsync off), or CLAIMD_TEST_POSTGRES_URL's when set.
func Postgres(t testing.TB, migrate MigrateFunc) string {
	t.Helper()
	pgOnce.Do(func() { pgErr = setupSharedPostgres(migrate) })
	if pgErr != nil {
		t.Fatalf("testenv: shared PostgreSQL: %v", pgErr)
	}
	// The pid keeps names apart when several binaries share an external server.
	name := fmt.Sprintf("test_%d_%d", os.Getpid(), pgSeq.Add(1))
	dbURL, err := withDatabase(pgAdminURL, name)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), migrateTimeout)
	defer cancel()
	if err := exec1(ctx, pgAdminURL, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(pgTemplate)); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), migrateTimeout)
		defer cancel()
		if err := exec1(ctx, pgAdminURL, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	return dbURL
}

// setupSharedPostgres finds or starts the shared server and prepares the
// template database on it.
func setupSharedPostgres(migrate MigrateFunc) error {
	templateMu.Lock()
	if templateMigrate != nil {
		migrate = templateMigrate
	}
	templateMu.Unlock()

	if pgAdminURL = os.Getenv(PostgresURLEnv); pgAdminURL == "" {
		s, err := StartPostgresProcess("", Options{})
		if err != nil {
			return err
		}
		pgServer = s
		pgAdminURL = pgURL(s.Port(), pgAdminDB, nil)
	}
	name := fmt.Sprintf("claimd_template_%d", os.Getpid())
	if err := prepareTemplate(pgAdminURL, name, migrate); err != nil {
		return fmt.Errorf("template database %s: %w", name, err)
	}
	pgTemplate = name
	return nil
}

// prepareTemplate creates and migrates database name, then closes it to
// connections: CREATE DATABASE ... TEMPLATE fails while anyone is connected to
// the template, and a migrate that leaks a connection must not break every test.
func prepareTemplate(adminURL, name string, migrate MigrateFunc) error {
	ctx, cancel := context.WithTimeout(context.Background(), migrateTimeout)
	defer cancel()
	tmplURL, err := withDatabase(adminURL, name)
	if err != nil {
		return err
	}
	if err := exec1(ctx, adminURL, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
		return err
	}
	if err := exec1(ctx, adminURL, "CREATE DATABASE "+ident(name)); err != nil {
		return err
	}
	if migrate != nil {
		if err := migrate(ctx, tmplURL); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	if err := exec1(ctx, adminURL, "ALTER DATABASE "+ident(name)+" WITH ALLOW_CONNECTIONS false"); err != nil {
		return err
	}
	// CREATE DATABASE waits a few seconds for terminated sessions to go away.
	return exec1(ctx, adminURL,
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", name)
}

// StartRedis starts a private redis-server for one test, which may Stop and
// Start it (Redis comes back empty); it is closed in t.Cleanup.
func StartRedis(t testing.TB) *Server {
	t.Helper()
	s, err := StartRedisProcess("")
	if err != nil {
		t.Fatalf("testenv: private Redis: %v", err)
	}
	cleanupClose(t, s)
	return s
}

// StartPostgres starts a private, fast (fsync off) PostgreSQL for one test,
// with one database migrated by migrate (nil: left empty) at the Server's URL.
// The test may Stop and Start it; data survives. It is closed in t.Cleanup.
func StartPostgres(t testing.TB, migrate MigrateFunc) *Server {
	t.Helper()
	return StartPostgresWith(t, Options{}, migrate)
}

// StartPostgresWith is StartPostgres with Options, e.g. Durable for a server
// that keeps PostgreSQL's crash-safe defaults.
func StartPostgresWith(t testing.TB, opts Options, migrate MigrateFunc) *Server {
	t.Helper()
	s, err := StartPostgresProcess("", opts)
	if err != nil {
		t.Fatalf("testenv: private PostgreSQL: %v", err)
	}
	cleanupClose(t, s)
	if migrate != nil {
		ctx, cancel := context.WithTimeout(context.Background(), migrateTimeout)
		defer cancel()
		if err := migrate(ctx, s.URL()); err != nil {
			t.Fatalf("testenv: migrate private PostgreSQL: %v", err)
		}
	}
	return s
}

func cleanupClose(t testing.TB, s *Server) {
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("testenv: close %s: %v", s.name, err)
		}
	})
}

// Servers is the pair of servers a benchmark run needs.
type Servers struct {
	Redis, Postgres *Server
}

// StartServers starts a redis-server and a PostgreSQL (see StartRedisProcess
// and StartPostgresProcess) under dir, for tools without a *testing.T.
func StartServers(dir string, opts Options) (*Servers, error) {
	r, err := StartRedisProcess(dir)
	if err != nil {
		return nil, err
	}
	p, err := StartPostgresProcess(dir, opts)
	if err != nil {
		return nil, errors.Join(err, r.Close())
	}
	return &Servers{Redis: r, Postgres: p}, nil
}

// Close stops both servers and removes their directories.
func (s *Servers) Close() error {
	return errors.Join(s.Redis.Close(), s.Postgres.Close())
}
