package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"geohub/store"
	"geohub/store/storetest"
)

// testDatabases maps a test's data directory to the PostgreSQL database
// its server uses when the suite runs on PostgreSQL, so that a restart on
// the same directory finds the same data.
var testDatabases sync.Map

// testDatabase is where a test's server keeps its data: the SQLite under
// dir, or, with GEOHUB_TEST_BACKEND=postgres, a fresh database of the test
// server with the master key in dir (as an operator keeps it beside the
// replicas' configuration).
func testDatabase(tb testing.TB, dir string) Database {
	tb.Helper()
	d := Database{Data: dir}
	if storetest.Backend() != "postgres" {
		return d
	}
	if v, ok := testDatabases.Load(dir); ok {
		return v.(Database)
	}
	d.URL = storetest.PostgresDatabase(tb)
	d.MasterKeyFile = filepath.Join(dir, "master.key")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		tb.Fatal(err)
	}
	if _, err := masterKey(d.MasterKeyFile); err != nil {
		tb.Fatal(err)
	}
	testDatabases.Store(dir, d)
	return d
}

// withDatabase appends to a command line that names --data DIR the flags
// that select that directory's database on the backend under test.
func withDatabase(tb testing.TB, args []string) []string {
	tb.Helper()
	for i, a := range args {
		if a == "--db" {
			return args
		}
		if a == "--data" && i+1 < len(args) {
			return append(append([]string(nil), args...), testDatabase(tb, args[i+1]).flags()...)
		}
	}
	return args
}

// openTestStore opens dir's database on the backend under test, for a test
// that puts rows where the API would refuse them or reads them back.
func openTestStore(tb testing.TB, dir string) openedStore {
	tb.Helper()
	db, _, err := testDatabase(tb, dir).open(context.Background(), cliLogger(), false)
	if err != nil {
		tb.Fatal(err)
	}
	return db
}

// sqliteOnly skips a test that inspects the SQLite files themselves (their
// bytes, their integrity, their permissions) when the suite runs on
// PostgreSQL, where those files do not exist.
func sqliteOnly(tb testing.TB) {
	tb.Helper()
	if storetest.Backend() == "postgres" {
		tb.Skip("inspects the SQLite files of the data directory; the PostgreSQL run has none")
	}
}

// flags are the serve flags that select d.
func (d Database) flags() []string {
	if !d.Postgres() {
		return nil
	}
	return []string{"--db", d.URL, "--master-key-file", d.MasterKeyFile}
}

// TestMain fails the run when a server the tests started reported a data
// race. The tests kill their servers, so a race cannot show in an exit
// status: each child built with -race writes its reports under GORACE's
// log_path instead, and they are read here once every test is done.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "geohub-race-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("GORACE", "log_path="+filepath.Join(dir, "report"))
	code := m.Run()
	reports, _ := filepath.Glob(filepath.Join(dir, "report*"))
	for _, r := range reports {
		b, _ := os.ReadFile(r)
		fmt.Fprintf(os.Stderr, "a geohub server started by the tests reported a data race (%s):\n%s\n", r, b)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildBinary is the geohub the end-to-end tests start: the one the test
// command built (GEOHUB_TEST_BINARY: in its first pass a -race server,
// while this test process, a client, runs without -race beside the other
// packages' race run), or else one compiled here once per test run, with
// this test binary's SQLite driver and, under -race, the race detector.
var buildBinary = sync.OnceValues(func() (string, error) { return testBinary("GEOHUB_TEST_BINARY", raceBuild) })

// plainBinary is the geohub of the fault suite (launch: kill -9 under
// load, full and read-only disks, memory and write-deadline bounds) and of
// the one-shot commands (token create, backup, migrate-data, operator
// reset-password), never built with the race detector: the suite's bounds
// are the real server's, and a command runs one goroutine, whose -race
// build only spent the tests' time (a bcrypt hash takes a second under it). A -race
// server peaked at 215 MiB under a 200 MiB bound the real one keeps with
// room to spare, and drained 1,847 of 2,338 deliveries in the 45 s the
// real one needs a few for. The in-process suites run the same writer,
// dispatcher and consumers under -race.
var plainBinary = sync.OnceValues(func() (string, error) {
	if os.Getenv("GEOHUB_TEST_BINARY_NORACE") == "" && !raceBuild {
		return buildBinary()
	}
	return testBinary("GEOHUB_TEST_BINARY_NORACE", false)
})

// testBinary is the binary env names, or one built now into a temp dir.
func testBinary(env string, race bool) (string, error) {
	if bin := os.Getenv(env); bin != "" {
		return bin, nil
	}
	dir, err := os.MkdirTemp("", "geohub-bin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "geohub")
	args := []string{"build", "-o", bin}
	if store.DriverName != "sqlite" {
		args = append(args, "-tags", "mattn")
	}
	if race {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// waitFor re-checks cond until it holds, failing the test with what it
// last showed once within has passed (storetest.Poll): the server under
// test is another process, which raises no signal this one could wait on,
// so the end-to-end tests look at its API, its files or a browser page.
// What runs in this process (the tests' own receivers) is waited on, not
// polled.
func waitFor(t testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	if !storetest.Poll(within, func() bool {
		var ok bool
		ok, last = cond()
		return ok
	}) {
		t.Fatalf("%s: not within %s (last: %s)", what, within, last)
	}
}

// alongside puts t in the package's parallel group, which runs once the
// serial tests are done, two at a time: the browser tests, the
// write-deadline test's idle minute, the functional end-to-end tests
// (commands, the demo, migrate-data, restarts) and those whose time is
// their own work or the server's (large events, at-rest scans), none of
// which asserts a timing that a neighbour could upset. The crash suite and
// the guide's receivers, which do, stay serial.
func alongside(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// bell is rung, without blocking, by what runs in this process (a test's
// receiver) each time something arrives; await re-checks on each ring.
type bell chan struct{}

func newBell() bell { return make(bell, 1) }

func (b bell) ring() {
	select {
	case b <- struct{}{}:
	default:
	}
}

// await re-checks cond each time b rings until it holds, failing the test
// with what it last showed once within has passed.
func (b bell) await(t testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		ok, last := cond()
		if ok {
			return
		}
		select {
		case <-b:
		case <-deadline.C:
			t.Fatalf("%s: not within %s (last: %s)", what, within, last)
		}
	}
}

// proc is a geohub server running as a real process.
type proc struct {
	cmd  *exec.Cmd
	addr string
	out  *syncBuffer
}

// syncBuffer collects the server's stderr for failure messages.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) WriteString(v string) {
	s.mu.Lock()
	s.b.WriteString(v)
	s.mu.Unlock()
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var listening = regexp.MustCompile(`geohub listening" addr=(\S+)`)

func startServer(t *testing.T, data string, flags ...string) *proc {
	t.Helper()
	return startBinary(t, buildBinary, data, flags...)
}

// startBinary starts the server that binary builds.
func startBinary(t *testing.T, binary func() (string, error), data string, flags ...string) *proc {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"serve", "--data", data, "--addr", "127.0.0.1:0"}, testDatabase(t, data).flags()...)
	cmd := exec.Command(bin, append(args, flags...)...)
	cmd.Env = append(os.Environ(), "GEOHUB_ADMIN_PASSWORD=senha-de-teste-123")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, out: &syncBuffer{}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.out.WriteString(sc.Text() + "\n")
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	select {
	case p.addr = <-addr:
	case <-time.After(60 * time.Second):
		t.Fatalf("server did not start:\n%s", p.out)
	}
	return p
}

func runCLI(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := plainBinary()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, withDatabase(t, args)...).Output()
	if err != nil {
		t.Fatalf("geohub %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

// lastLine is how scripts take the token: `geohub token create ... | tail -n1`.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func publish(client *http.Client, addr, token, body string) (int, string, error) {
	req, _ := http.NewRequest("POST", "http://"+addr+"/api/events", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	var rec struct {
		EventID string `json:"event_id"`
	}
	b, _ := io.ReadAll(res.Body)
	json.Unmarshal(b, &rec)
	return res.StatusCode, rec.EventID, nil
}

func jornada(i int) string {
	return fmt.Sprintf(`{"tipo":"jornada:iniciada","origem":"teste","payload":{"jornadaId":"0199bb3e-0000-7000-8000-%012d",`+
		`"inicio":"2026-11-30T12:00:00Z","servidor":{"nome":"Ana","cpf":"12345678901"}}}`, i)
}

func TestAcknowledgedPublishesSurviveKill9(t *testing.T) {
	data := t.TempDir()
	srv := startServer(t, data)
	// token create works against the data directory of a running server.
	token := lastLine(runCLI(t, "token", "create", "--papel", "admin", "--data", data))
	if !strings.HasPrefix(token, "gh_") {
		t.Fatalf("token create's last line is %q", token)
	}

	client := &http.Client{Timeout: 10 * time.Second}
	var mu sync.Mutex
	var acked []string
	var n atomic.Int64
	var wg sync.WaitGroup
	enough := make(chan struct{})
	var once sync.Once
	for range 16 {
		wg.Go(func() {
			for {
				i := int(n.Add(1))
				status, id, err := publish(client, srv.addr, token, jornada(i))
				if err != nil {
					return // the server is gone
				}
				if status != http.StatusCreated {
					t.Errorf("publish: status %d", status)
					return
				}
				mu.Lock()
				acked = append(acked, id)
				if len(acked) >= 400 {
					once.Do(func() { close(enough) })
				}
				mu.Unlock()
			}
		})
	}
	select {
	case <-enough:
	case <-time.After(60 * time.Second):
		t.Fatal("publishing too slow to reach 400 events")
	}
	// SIGKILL while publishers are mid-flight: no shutdown code runs.
	if err := srv.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	srv.cmd.Wait()
	wg.Wait()

	srv = startServer(t, data)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range acked {
		req, _ := http.NewRequest("GET", "http://"+srv.addr+"/api/events/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("acknowledged event %s is missing after kill -9 (status %d)", id, res.StatusCode)
		}
	}
	t.Logf("%d acknowledged events all present after kill -9", len(acked))
}

func TestGracefulShutdownAndBackup(t *testing.T) {
	alongside(t)
	data := t.TempDir()
	srv := startServer(t, data)
	token := lastLine(runCLI(t, "token", "create", "--papel", "produtor", "--nome", "integra", "--data", data))
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range 5 {
		if status, _, err := publish(client, srv.addr, token, jornada(i)); err != nil || status != http.StatusCreated {
			t.Fatalf("publish: %d %v", status, err)
		}
	}
	out := filepath.Join(t.TempDir(), "copia.db")
	if storetest.Backend() == "postgres" {
		// PostgreSQL is backed up with its own tools.
		bin, _ := plainBinary()
		msg, err := exec.Command(bin, withDatabase(t, []string{"backup", "--out", out, "--data", data})...).CombinedOutput()
		if err == nil || !strings.Contains(string(msg), "pg_dump") {
			t.Fatalf("backup on PostgreSQL: %v\n%s", err, msg)
		}
	} else {
		runCLI(t, "backup", "--out", out, "--data", data) // while the server runs
		cp, err := store.Open(context.Background(), out, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := cp.CountEvents(context.Background()); n != 5 {
			t.Fatalf("backup holds %d events, want 5", n)
		}
		cp.Close()
	}

	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := srv.cmd.Wait(); err != nil {
		t.Fatalf("SIGTERM must exit 0: %v\n%s", err, srv.out)
	}
	// The WAL was checkpointed into the main file on the way out.
	if fi, err := os.Stat(filepath.Join(data, store.FileName+"-wal")); err == nil && fi.Size() > 0 {
		t.Fatalf("WAL holds %d bytes after a clean shutdown", fi.Size())
	}
	if fi, err := os.Stat(filepath.Join(data, masterKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("master key must be 0600: %v %v", fi.Mode(), err)
	}
}

// collector is a CAD receiver that remembers which events arrived.
type collector struct {
	mu      sync.Mutex
	seen    map[string]int
	arrived bell
}

func newCollector() *collector { return &collector{seen: map[string]int{}, arrived: newBell()} }

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	// Wall time on purpose: a receiver that takes a while keeps some
	// deliveries in flight when the kill comes.
	time.Sleep(5 * time.Millisecond)
	c.mu.Lock()
	c.seen[r.Header.Get("X-Geohub-Evento-Id")]++
	c.mu.Unlock()
	c.arrived.ring()
	w.WriteHeader(http.StatusNoContent)
}

// awaitHas waits until at least n of ids arrived.
func (c *collector) awaitHas(t *testing.T, within time.Duration, ids []string, n int) {
	t.Helper()
	c.arrived.await(t, within, fmt.Sprintf("%d of %d events to arrive", n, len(ids)), func() (bool, string) {
		got := c.has(ids)
		return got >= n, fmt.Sprintf("%d arrived", got)
	})
}

func (c *collector) has(ids []string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, id := range ids {
		if c.seen[id] > 0 {
			n++
		}
	}
	return n
}

func apiCall(t *testing.T, client *http.Client, method, url, token, body string) []byte {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, url, res.StatusCode, b)
	}
	return b
}

func TestEveryAcknowledgedEventIsDeliveredAfterKill9MidDelivery(t *testing.T) {
	data := t.TempDir()
	rec := newCollector()
	cad := httptest.NewServer(rec)
	defer cad.Close()
	srv := startServer(t, data, "--insecure-callbacks")
	token := lastLine(runCLI(t, "token", "create", "--papel", "admin", "--data", data))
	client := &http.Client{Timeout: 10 * time.Second}
	apiCall(t, client, "POST", "http://"+srv.addr+"/api/integradores", token,
		`{"nome":"CAD","callback_url":"`+cad.URL+`/eventos","hosts_permitidos":["127.0.0.1"]}`)

	var acked []string
	for i := range 300 {
		status, id, err := publish(client, srv.addr, token, jornada(i))
		if err != nil || status != http.StatusCreated {
			t.Fatalf("publish %d: %d %v", i, status, err)
		}
		acked = append(acked, id)
	}
	rec.awaitHas(t, 30*time.Second, acked, 30)
	srv.cmd.Process.Signal(syscall.SIGKILL) // mid-delivery: leases held, outcomes unrecorded
	srv.cmd.Wait()
	if n := rec.has(acked); n == len(acked) {
		t.Logf("all %d arrived before the kill; the restart path is still checked", n)
	}

	startServer(t, data, "--insecure-callbacks")
	rec.awaitHas(t, time.Minute, acked, len(acked))
}

func TestMemoryLimitFollowsTheCgroup(t *testing.T) {
	dir := t.TempDir()
	write := func(v string) string {
		f := filepath.Join(dir, strconv.Quote(v))
		if err := os.WriteFile(f, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	const def = 512 << 20
	for _, c := range []struct {
		file string
		want int64
	}{
		{filepath.Join(dir, "absent"), def},
		{write("max\n"), def},
		{write("268435456\n"), 192 << 20},
		{write("4294967296\n"), def},
		{write("garbage"), def},
	} {
		if got := memoryLimit(def, c.file); got != c.want {
			t.Errorf("memoryLimit(%s) = %d, want %d", c.file, got, c.want)
		}
	}
}

// consoleLogin signs in on the console's login form and says whether it
// let the browser in (a redirect away from /login).
func consoleLogin(t *testing.T, c *http.Client, addr, login, senha string) bool {
	t.Helper()
	res, err := c.Get("http://" + addr + "/login")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf on the login page: %s", page)
	}
	res, err = c.PostForm("http://"+addr+"/login", url.Values{"csrf": {string(m[1])}, "login": {login}, "senha": {senha}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode == http.StatusSeeOther
}

// consoleHome says whether c's session still opens the console.
func consoleHome(t *testing.T, c *http.Client, addr string) bool {
	t.Helper()
	res, err := c.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

func TestOperatorResetPasswordFromTheCommandLine(t *testing.T) {
	alongside(t)
	data := t.TempDir()
	srv := startServer(t, data)
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if !consoleLogin(t, browser, srv.addr, "admin", "senha-de-teste-123") || !consoleHome(t, browser, srv.addr) {
		t.Fatal("the admin could not sign in before the reset")
	}

	// While the server runs, as token create does.
	out := runCLI(t, "operator", "reset-password", "--login", "admin", "--data", data)
	senha := lastLine(out)
	if len(senha) < 10 || strings.Contains(senha, " ") {
		t.Fatalf("the last line is not a password:\n%s", out)
	}
	if consoleHome(t, browser, srv.addr) {
		t.Error("the session opened before the reset still works")
	}
	fresh := func() *http.Client {
		jar, _ := cookiejar.New(nil)
		return &http.Client{Jar: jar, Timeout: 10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if consoleLogin(t, fresh(), srv.addr, "admin", "senha-de-teste-123") {
		t.Error("the old password still signs in")
	}
	if c := fresh(); !consoleLogin(t, c, srv.addr, "admin", senha) || !consoleHome(t, c, srv.addr) {
		t.Error("the new password does not sign in")
	}
	if strings.Contains(srv.out.String(), senha) {
		t.Error("the new password reached the server's log")
	}

	bin, _ := plainBinary()
	msg, err := exec.Command(bin, withDatabase(t, []string{"operator", "reset-password", "--login", "ninguem", "--data", data})...).CombinedOutput()
	if err == nil || !strings.Contains(string(msg), `no console account with login "ninguem"`) {
		t.Errorf("an unknown login: %v\n%s", err, msg)
	}
}

// A mistyped --data must not become a new, empty data directory with a
// token or an account in it that the running server never sees.
func TestCommandsRefuseADataDirWithoutDatabase(t *testing.T) {
	bin, err := plainBinary()
	if err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "dados-errados")
	for _, args := range [][]string{
		{"token", "create", "--papel", "leitor"},
		{"token", "revoke", "--id", "x"},
		{"operator", "reset-password", "--login", "admin"},
		{"backup", "--out", filepath.Join(t.TempDir(), "copia.db")},
	} {
		out, err := exec.Command(bin, append(args, "--data", missing)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "no database at "+filepath.Join(missing, store.FileName)) {
			t.Errorf("geohub %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if _, err := os.Stat(missing); !os.IsNotExist(err) {
			t.Fatalf("geohub %s created %s", strings.Join(args, " "), missing)
		}
	}
}
