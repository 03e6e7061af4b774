# Sourced by scripts/test: a throwaway PostgreSQL cluster for the tests of
# the PostgreSQL backend. start_test_postgres finds (or, through the
# caller's apt_install, installs) Debian's server binaries, creates a
# cluster in a temporary directory, starts it on 127.0.0.1 at a free port
# and exports GEOHUB_TEST_POSTGRES and GEOHUB_REQUIRE_POSTGRES; the EXIT
# trap stops it and removes the directory. The tests create a database of
# their own in it per test, so they run in parallel.

pg_bindir() {
  local d
  if command -v pg_config >/dev/null 2>&1; then
    d=$(pg_config --bindir 2>/dev/null || true)
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return; fi
  fi
  # pg_config may come from libpq-dev alone; the server's binaries live
  # under /usr/lib/postgresql/<major>/bin on Debian, newest last.
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return; fi
  done
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v initdb)"
  fi
}

# free_port prints a TCP port nothing listens on at 127.0.0.1. Another
# process may take it before the server binds it, so the caller retries.
free_port() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
  echo "no free port found" >&2
  return 1
}

start_test_postgres() {
  local bin
  bin=$(pg_bindir)
  if [ -z "$bin" ]; then
    apt_install postgresql
    bin=$(pg_bindir)
  fi
  if [ -z "$bin" ]; then echo "PostgreSQL's initdb and pg_ctl not found" >&2; exit 1; fi
  # initdb refuses to run as root: the cluster then belongs to the postgres
  # user (Debian's package creates it), and so does its directory.
  local as=()
  PG_TEST_DIR=$(mktemp -d /tmp/geohub-pg.XXXXXX)
  if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    chown postgres: "$PG_TEST_DIR"
    as=(runuser -u postgres --)
  fi
  PG_TEST_AS=("${as[@]}")
  PG_TEST_BIN=$bin
  trap stop_test_postgres EXIT
  "${as[@]}" "$bin/initdb" -D "$PG_TEST_DIR/data" -U postgres --auth=trust \
    --encoding=UTF8 --locale=C.UTF-8 >"$PG_TEST_DIR/initdb.log" 2>&1 ||
    { cat "$PG_TEST_DIR/initdb.log" >&2; exit 1; }
  local port started=
  for _ in 1 2 3 4 5; do
    port=$(free_port)
    # Durability as production has it (SPEC 11): fsync and a synchronous
    # commit, which the tests read back. Loopback only, the socket in the
    # cluster's own directory, and enough connections for parallel tests
    # that each open several pools.
    if "${as[@]}" "$bin/pg_ctl" -D "$PG_TEST_DIR/data" -l "$PG_TEST_DIR/server.log" -w -t 30 \
      -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$PG_TEST_DIR \
          -c fsync=on -c synchronous_commit=on -c max_connections=300" start >/dev/null; then
      started=1
      break
    fi
  done
  if [ -z "$started" ]; then cat "$PG_TEST_DIR/server.log" >&2; exit 1; fi
  export GEOHUB_TEST_POSTGRES="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
  export GEOHUB_REQUIRE_POSTGRES=1 # so a missing server fails instead of skipping
  echo "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port"
}

stop_test_postgres() {
  if [ -n "${PG_TEST_DIR:-}" ] && [ -d "$PG_TEST_DIR" ]; then
    "${PG_TEST_AS[@]}" "$PG_TEST_BIN/pg_ctl" -D "$PG_TEST_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$PG_TEST_DIR"
  fi
}
