package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Backend is the store the kits build on: "sqlite" (the default) or
// "postgres", from GEOHUB_TEST_BACKEND. scripts/test runs the suites of
// app, web and cmd once more with it set to postgres.
func Backend() string {
	if b := os.Getenv("GEOHUB_TEST_BACKEND"); b != "" {
		return b
	}
	return "sqlite"
}

// PostgresServer is the test server's URL (scripts/test starts one).
// Without it the test skips, unless GEOHUB_REQUIRE_POSTGRES=1 says the run
// must include PostgreSQL.
func PostgresServer(tb testing.TB) string {
	tb.Helper()
	url := os.Getenv("GEOHUB_TEST_POSTGRES")
	if url == "" {
		if os.Getenv("GEOHUB_REQUIRE_POSTGRES") == "1" || Backend() == "postgres" {
			tb.Fatal("no GEOHUB_TEST_POSTGRES, but the run must test PostgreSQL (GEOHUB_REQUIRE_POSTGRES=1 or GEOHUB_TEST_BACKEND=postgres)")
		}
		tb.Skip("GEOHUB_TEST_POSTGRES is not set: no PostgreSQL to test against (scripts/test starts one)")
	}
	return url
}

// PostgresDatabase creates an empty database of the test's own on the
// test server, so tests run in parallel, drops it at cleanup, and returns
// its URL.
func PostgresDatabase(tb testing.TB) string {
	tb.Helper()
	url := PostgresServer(tb)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		tb.Fatal(err)
	}
	b := make([]byte, 8)
	rand.Read(b)
	name := "geohub_test_" + hex.EncodeToString(b)
	admin, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		if os.Getenv("GEOHUB_REQUIRE_POSTGRES") != "1" && Backend() != "postgres" {
			tb.Skipf("PostgreSQL at GEOHUB_TEST_POSTGRES unreachable: %v", err)
		}
		tb.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(context.Background(), "CREATE DATABASE "+name); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		c, err := pgx.ConnectConfig(context.Background(), cfg)
		if err != nil {
			tb.Errorf("drop test database: %v", err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			tb.Errorf("drop test database: %v", err)
		}
	})
	return WithDatabase(url, name)
}

// WithDatabase is url with its path set to name.
func WithDatabase(url, name string) string {
	rest, query, _ := strings.Cut(url, "?")
	if i := strings.Index(rest, "://"); i >= 0 {
		if j := strings.Index(rest[i+3:], "/"); j >= 0 {
			rest = rest[:i+3+j]
		}
	}
	out := rest + "/" + name
	if query != "" {
		out += "?" + query
	}
	return out
}
