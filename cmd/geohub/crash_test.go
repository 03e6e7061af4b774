//go:build linux

// The crash and disk-fault suite (issue 6): the real binary, SIGKILLed
// under publish and delivery load again and again, started on a read-only
// data directory and made read-only under load, and run out of disk space,
// each time checked for lost, duplicated or half-written work and for a
// database that still passes integrity_check.
//
// Linux only: the faults are set with setuid (the server runs as an
// unprivileged user, because root ignores file permissions), RLIMIT_FSIZE
// (prlimit on the running server) and, when allowed, a small tmpfs.

package main

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/store"
	"geohub/store/storetest"
)

// ---------------------------------------------------------------------------
// Launching the real binary under faults.

// fsizeEnv makes the test binary a launcher: it sets RLIMIT_FSIZE on itself
// and execs the command in its arguments, which inherits the limit. exec.Cmd
// has no rlimit field, and setting the limit on the test process itself
// would hit the test's own files.
const fsizeEnv = "GEOHUB_TEST_EXEC_WITH_FSIZE"

func init() {
	v := os.Getenv(fsizeEnv)
	if v == "" {
		return
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || len(os.Args) < 2 {
		fmt.Fprintf(os.Stderr, "launcher: bad %s=%q or no command\n", fsizeEnv, v)
		os.Exit(111)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		fmt.Fprintln(os.Stderr, "launcher: getrlimit:", err)
		os.Exit(111)
	}
	lim.Cur = n // the soft limit only: the test may lift it again with prlimit
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		fmt.Fprintln(os.Stderr, "launcher: setrlimit:", err)
		os.Exit(111)
	}
	env := slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, fsizeEnv+"=") })
	err = syscall.Exec(os.Args[1], os.Args[1:], env)
	fmt.Fprintln(os.Stderr, "launcher: exec:", err)
	os.Exit(111)
}

// setFileSizeLimit sets the soft RLIMIT_FSIZE of a running process (prlimit(2);
// the syscall package exports no wrapper). A write past the limit fails with
// EFBIG: the kernel also sends SIGXFSZ, which the Go runtime ignores unless
// the program asked for it with signal.Notify.
func setFileSizeLimit(pid int, limit uint64) error {
	var old syscall.Rlimit
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), syscall.RLIMIT_FSIZE,
		0, uintptr(unsafe.Pointer(&old)), 0, 0); e != 0 {
		return e
	}
	lim := syscall.Rlimit{Cur: min(limit, old.Max), Max: old.Max}
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), syscall.RLIMIT_FSIZE,
		uintptr(unsafe.Pointer(&lim)), 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

// launch describes one start of the binary.
type launch struct {
	bin   string              // default: plainBinary()
	data  string              // --data
	flags []string            // more serve flags
	cred  *syscall.Credential // run as this user (nil: as the test)
	fsize uint64              // RLIMIT_FSIZE at exec (0: none)
	// consumerLog, when set, runs the test binary as the server instead,
	// with an in-process consumer that appends what it handled there (see
	// crash_consumer_test.go).
	consumerLog string
	// readModelDelay, with consumerLog, slows each fold of the ocorrências
	// read model by this much, so that its consumer falls behind.
	readModelDelay time.Duration
}

// child is one geohub process. exited is closed when it is gone; err is then
// what Wait returned.
type child struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string // set once it listens
	out    *lineLog
	exited chan struct{}
	err    error
}

// lineLog keeps the process's output and reports the address it listens on.
type lineLog struct {
	syncBuffer
	mu    sync.Mutex
	found bool
	addr  chan string
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.WriteString(string(p))
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.found {
		if m := listening.FindStringSubmatch(l.String()); m != nil {
			l.found = true
			l.addr <- m[1]
		}
	}
	return len(p), nil
}

// start runs geohub serve and returns once it listens or has exited
// (c.exited closed: a refused start is an outcome the caller checks).
func (l launch) start(t *testing.T) *child {
	t.Helper()
	bin := l.bin
	if bin == "" {
		var err error
		if bin, err = plainBinary(); err != nil {
			t.Fatal(err)
		}
	}
	args := append(withDatabase(t, []string{bin, "serve", "--data", l.data, "--addr", "127.0.0.1:0"}), l.flags...)
	env := append(os.Environ(), "GEOHUB_ADMIN_PASSWORD=senha-de-teste-123")
	var cmd *exec.Cmd
	switch {
	case l.consumerLog != "":
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command(self, args[1:]...)
		env = append(env, consumerEnv+"="+l.consumerLog, readModelDelayEnv+"="+l.readModelDelay.String())
	case l.fsize > 0:
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd = exec.Command(self, args...)
		env = append(env, fsizeEnv+"="+strconv.FormatUint(l.fsize, 10))
	default:
		cmd = exec.Command(args[0], args[1:]...)
	}
	cmd.Env = env
	cmd.Dir = filepath.Dir(bin) // readable by the server's user, unlike the test's cwd perhaps
	if l.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: l.cred}
	}
	c := &child{t: t, cmd: cmd, out: &lineLog{addr: make(chan string, 1)}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = c.out, c.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start geohub: %v", err)
	}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(c.kill)
	select {
	case c.addr = <-c.out.addr:
	case <-c.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("geohub neither listened nor exited within 60 s:\n%s", c.out)
	}
	return c
}

// kill is kill -9: no shutdown code runs.
func (c *child) kill() {
	select {
	case <-c.exited:
		return
	default:
	}
	c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
}

// stop is SIGTERM: the server must finish and exit 0.
func (c *child) stop() {
	c.t.Helper()
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		c.t.Fatalf("geohub did not exit within 30 s of SIGTERM:\n%s", c.out)
	}
	if c.err != nil {
		c.t.Fatalf("SIGTERM must exit 0: %v\n%s", c.err, c.out)
	}
}

// refused asserts that the process exited non-zero by itself, and returns
// its output.
func (c *child) refused(why string) string {
	c.t.Helper()
	select {
	case <-c.exited:
	default:
		c.t.Fatalf("%s: geohub started (listening on %s) instead of refusing", why, c.addr)
	}
	if c.err == nil {
		c.t.Fatalf("%s: geohub exited 0; want a non-zero exit:\n%s", why, c.out)
	}
	var ee *exec.ExitError
	if !errors.As(c.err, &ee) || !ee.Exited() {
		c.t.Fatalf("%s: geohub did not exit by itself (%v):\n%s", why, c.err, c.out)
	}
	return c.out.String()
}

func (c *child) alive() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// cli runs a geohub subcommand as the given user.
func cli(t *testing.T, cred *syscall.Credential, bin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, withDatabase(t, args)...)
	cmd.Dir = filepath.Dir(bin)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out) + stderr.String(), err
	}
	return string(out), nil
}

// unprivileged returns the credential to run the server with so that file
// permissions bind it (root ignores them), a sandbox directory that user can
// reach, and a copy of the binary it may execute. It skips when there is no
// such mechanism.
func unprivileged(t *testing.T) (*syscall.Credential, string, string) {
	t.Helper()
	bin, err := plainBinary()
	if err != nil {
		t.Fatal(err)
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		// nobody, without root's supplementary groups.
		cred = &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}
	}
	// A directory every user can traverse: t.TempDir's parents are 0700.
	var box string
	for _, base := range []string{os.TempDir(), "/tmp", "/var/tmp"} {
		if !traversable(base) {
			continue
		}
		if box, err = os.MkdirTemp(base, "geohub-faults-"); err == nil {
			break
		}
	}
	if box == "" {
		faultsUnavailable(t, "no temporary directory that an unprivileged user can traverse")
	}
	t.Cleanup(func() { unlock(box); os.RemoveAll(box) })
	if err := os.Chmod(box, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	copyBin := filepath.Join(box, "geohub")
	if err := os.WriteFile(copyBin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	// Prove the mechanism: the user runs the binary, and cannot write where
	// its permissions forbid it (a process with CAP_DAC_OVERRIDE could).
	probe := filepath.Join(box, "probe")
	if err := os.Mkdir(probe, 0o555); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		os.Chown(probe, int(cred.Uid), int(cred.Gid))
	}
	out, err := cli(t, cred, copyBin, "migrate", "--data", filepath.Join(probe, "sub"))
	var exited *exec.ExitError
	switch {
	case err == nil:
		faultsUnavailable(t, "file permissions do not bind the server's user here (migrate wrote into a 0555 directory): %s", out)
	case !errors.As(err, &exited):
		// setuid refused (no CAP_SETUID, an unmapped uid in a user
		// namespace) or the binary is not reachable.
		faultsUnavailable(t, "cannot run geohub as an unprivileged user here: %v", err)
	}
	return cred, box, copyBin
}

// faultsUnavailable skips a read-only fault test where this machine cannot
// stage it, unless GEOHUB_REQUIRE_FAULTS=1 (the test command sets it when it
// runs as root, where the stage always works): then a promised scenario
// must not pass by not running.
func faultsUnavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("GEOHUB_REQUIRE_FAULTS") == "1" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

func traversable(dir string) bool {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

// unlock gives the owner back the directories below dir (WalkDir visits a
// directory before reading it), so cleanup works without root too.
func unlock(dir string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
}

// chownTree hands dir and everything in it to cred's user.
func chownTree(t *testing.T, dir string, cred *syscall.Credential) {
	t.Helper()
	if cred == nil {
		return
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(cred.Uid), int(cred.Gid))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// setMode sets the permissions of dir and of every file in it.
func setMode(t *testing.T, dir string, dirMode, fileMode os.FileMode) {
	t.Helper()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Chmod(filepath.Join(dir, e.Name()), fileMode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, dirMode); err != nil {
		t.Fatal(err)
	}
}

// snapshot is what a directory holds: name → mode, size, mtime and content hash.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%v %d %d", fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if !d.IsDir() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h := sha256.Sum256(b)
			desc += " " + hex.EncodeToString(h[:8])
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameSnapshot(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	for name, b := range before {
		if a, ok := after[name]; !ok {
			t.Errorf("%s: %s disappeared", what, name)
		} else if a != b {
			t.Errorf("%s: %s changed: %s → %s", what, name, b, a)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			t.Errorf("%s: %s was created", what, name)
		}
	}
}

// ---------------------------------------------------------------------------
// HTTP helpers.

// answer is one API response, with the error shape decoded when it is one.
type answer struct {
	status  int
	body    []byte
	eventID string
	erro    string
	codigo  string
}

func call(client *http.Client, method, url, token, body string) (answer, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{status: res.StatusCode, body: b}
	var v struct {
		EventID string `json:"event_id"`
		Erro    string `json:"erro"`
		Codigo  string `json:"codigo"`
	}
	json.Unmarshal(b, &v)
	a.eventID, a.erro, a.codigo = v.EventID, v.Erro, v.Codigo
	return a, nil
}

// clearServerError checks the API's promise for a failed write: a 5xx in the
// one error shape, with a message and the code of an unavailable or internal
// failure.
func clearServerError(a answer) error {
	if a.status < 500 {
		return fmt.Errorf("status %d: %s", a.status, a.body)
	}
	if a.erro == "" || (a.codigo != string(app.EUnavailable) && a.codigo != string(app.EInternal)) {
		return fmt.Errorf("status %d without the error shape {erro, codigo: indisponivel|interno}: %s", a.status, a.body)
	}
	return nil
}

// eventBody is a jornada publish with a client-chosen event_id, so a publish
// whose answer was lost can be retried: 200 then proves it was stored.
func eventBody(id, agregado string) string {
	agg := ""
	if agregado != "" {
		agg = `"agregado":"` + agregado + `",`
	}
	return `{"event_id":"` + id + `",` + agg + `"tipo":"jornada:iniciada","origem":"teste","payload":{"jornadaId":"` + id +
		`","inicio":"2026-11-30T12:00:00Z","servidor":{"nome":"Ana","cpf":"12345678901"}}}`
}

func newEventID() string { return uuid.Must(uuid.NewV7()).String() }

// listAll pages through a list route (limite 500) and returns every row.
func listAll[T any](t *testing.T, client *http.Client, url, token string) []T {
	t.Helper()
	var all []T
	for {
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		a, err := call(client, "GET", fmt.Sprintf("%s%slimite=500&deslocamento=%d", url, sep, len(all)), token, "")
		if err != nil || a.status != http.StatusOK {
			t.Fatalf("GET %s: %v %d %s", url, err, a.status, a.body)
		}
		var page struct {
			Linhas []T `json:"linhas"`
			Total  int `json:"total"`
		}
		if err := json.Unmarshal(a.body, &page); err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Linhas...)
		if len(page.Linhas) == 0 || len(all) >= page.Total {
			if len(all) != page.Total {
				t.Fatalf("GET %s: paging returned %d rows, total says %d", url, len(all), page.Total)
			}
			return all
		}
	}
}

// total reads the total of a list route with one row.
func total(client *http.Client, url, token string) (int, error) {
	a, err := call(client, "GET", url, token, "")
	if err != nil {
		return 0, err
	}
	if a.status != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %d %s", url, a.status, a.body)
	}
	var page struct {
		Total int `json:"total"`
	}
	return page.Total, json.Unmarshal(a.body, &page)
}

// checkDLQ checks what the binary exposes of the consumers' DLQ: the binary
// registers no in-process consumer, so it must be empty and its totals must
// agree with each other.
func checkDLQ(t *testing.T, client *http.Client, addr, token string) {
	t.Helper()
	a, err := call(client, "GET", "http://"+addr+"/api/events/dlq", token, "")
	if err != nil || a.status != http.StatusOK {
		t.Fatalf("GET /api/events/dlq: %v %d %s", err, a.status, a.body)
	}
	var st app.DLQStats
	if err := json.Unmarshal(a.body, &st); err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, n := range st.PendentesPorColonia {
		sum += n
	}
	if sum != st.TotalPendentes || st.TotalPendentes != 0 || len(st.Entradas) != 0 {
		t.Errorf("DLQ inconsistent or not empty (the binary has no consumer): %s", a.body)
	}
}

// ---------------------------------------------------------------------------
// The database, read after the server exited.

func openReadOnly(t *testing.T, data string) *sql.DB {
	t.Helper()
	db, err := sql.Open(store.DriverName, store.DSN(filepath.Join(data, store.FileName), true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// checkIntegrity runs SQLite's own checks: structure and foreign keys.
func checkIntegrity(t *testing.T, db *sql.DB) {
	t.Helper()
	var res string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&res); err != nil || res != "ok" {
		t.Fatalf("integrity_check: %q %v", res, err)
	}
	rows, err := db.Query("PRAGMA foreign_key_check")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	if rows.Next() {
		t.Fatal("foreign_key_check found rows pointing nowhere")
	}
}

// logIDs returns the event ids in the log, failing on a duplicate.
func logIDs(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	rows, err := db.Query("SELECT event_id, coalesce(agregado, '') FROM event_log ORDER BY sequence_number")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, agg string
		if err := rows.Scan(&id, &agg); err != nil {
			t.Fatal(err)
		}
		if _, dup := out[id]; dup {
			t.Errorf("event %s is in the log twice", id)
		}
		out[id] = agg
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// ---------------------------------------------------------------------------
// 1. kill -9, repeatedly, under publish and delivery load.

// cad is a loopback CAD receiver that records every delivery it answered.
type cad struct {
	flaky   atomic.Bool // while set, 3 requests in 10 get a 500
	n       atomic.Int64
	clock   atomic.Int64 // ticks at every request's start and end
	mu      sync.Mutex
	arrived map[string][]arrival // by event id
}

type arrival struct {
	agregado string
	seq      int64
	attempt  int
	status   int
	// start and end place the request among every other's beginning and
	// end at this receiver: two requests overlapped when neither ended
	// before the other started.
	start, end int64
}

func newCAD() *cad { return &cad{arrived: map[string][]arrival{}} }

func (c *cad) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := c.clock.Add(1)
	io.Copy(io.Discard, r.Body)
	// Wall time on purpose: deliveries in flight when the kill comes.
	time.Sleep(2 * time.Millisecond)
	status := http.StatusNoContent
	// A fixed pattern rather than coin flips: ~30% failures, never more than
	// one in a row, so the circuit breaker (5 consecutive failures) never
	// opens and parks the integrator for 30 s, which would only slow the test.
	if n := c.n.Add(1) % 10; c.flaky.Load() && (n == 0 || n == 4 || n == 7) {
		status = http.StatusInternalServerError
	}
	seq, _ := strconv.ParseInt(r.Header.Get("X-Geohub-Sequencia"), 10, 64)
	attempt, _ := strconv.Atoi(r.Header.Get("X-Geohub-Tentativa"))
	c.mu.Lock()
	id := r.Header.Get("X-Geohub-Evento-Id")
	c.arrived[id] = append(c.arrived[id], arrival{r.Header.Get("X-Geohub-Agregado"), seq, attempt, status, start, c.clock.Add(1)})
	c.mu.Unlock()
	w.WriteHeader(status)
}

// accepted reports whether the event arrived and was answered 2xx with this
// aggregate and sequence.
func (c *cad) accepted(id, agregado string, seq int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.arrived[id] {
		if a.status < 300 && a.agregado == agregado && a.seq == seq {
			return true
		}
	}
	return false
}

// delivered reports whether the event arrived and was answered 2xx.
func (c *cad) delivered(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.arrived[id] {
		if a.status < 300 {
			return true
		}
	}
	return false
}

func (c *cad) stats() (requests, failed, redelivered, maxAttempt int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, as := range c.arrived {
		ok := 0
		for _, a := range as {
			requests++
			maxAttempt = max(maxAttempt, a.attempt)
			if a.status >= 300 {
				failed++
			} else {
				ok++
			}
		}
		if ok > 1 {
			redelivered++
		}
	}
	return
}

// registerCAD registers an integrator named name whose callback is the
// receiver at url, with a 1 s backoff at every step so retries come within
// a test's time, and returns its id.
func registerCAD(t *testing.T, client *http.Client, addr, token, name, url string) string {
	t.Helper()
	a, err := call(client, "POST", "http://"+addr+"/api/integradores", token, `{"nome":"`+name+`","callback_url":"`+
		url+`/eventos","hosts_permitidos":["127.0.0.1"],"backoff":["1s","1s","1s","1s","1s","1s","1s","1s","1s","1s","1s","1s"]}`)
	if err != nil || a.status != http.StatusCreated {
		t.Fatalf("create integrator: %v %d %s", err, a.status, a.body)
	}
	var in struct{ ID string }
	json.Unmarshal(a.body, &in)
	return in.ID
}

// ledger is the publishers' record: what was acknowledged, and what was sent
// without an answer (the server died): maybe stored, maybe not.
type ledger struct {
	mu       sync.Mutex
	acked    map[string]string // event id → agregado
	doubt    []pendingPublish
	retried  int // in-doubt publishes resent
	existed  int // ... of which were stored before the kill (200)
	problems []string
	// answered rings after each publish's outcome is recorded.
	answered bell
}

func newLedger() *ledger { return &ledger{acked: map[string]string{}, answered: newBell()} }

// await waits until enough holds or srv dies, re-checking after each
// publish's answer; it fails the test if srv died or within passed.
func (l *ledger) await(t *testing.T, srv *child, within time.Duration, what string, enough func() bool) {
	t.Helper()
	// A server that dies rings too: its publishers may all have given up
	// before it was reaped.
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-srv.exited:
			l.answered.ring()
		case <-done:
		}
	}()
	l.answered.await(t, within, what, func() (bool, string) {
		return enough() || !srv.alive(), fmt.Sprintf("%d acknowledged, %d in doubt", l.count(), l.unresolved())
	})
	if !srv.alive() {
		t.Fatalf("%s: the server died: %d acknowledged, %d in doubt\n%s", what, l.count(), l.unresolved(), srv.out)
	}
}

type pendingPublish struct {
	id, agregado string
	retry        bool
}

func (l *ledger) next(aggregates int) pendingPublish {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.doubt); n > 0 {
		p := l.doubt[n-1]
		l.doubt = l.doubt[:n-1]
		p.retry = true
		return p
	}
	return pendingPublish{id: newEventID(), agregado: fmt.Sprintf("jornada:equipe-%d", rand.IntN(aggregates))}
}

func (l *ledger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

func (l *ledger) unresolved() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.doubt)
}

// publishUntilGone publishes until stop closes or the server stops
// answering. Each answer must be a 201 for a fresh id, 201 or 200 for a
// resent one, with the event_id sent.
func (l *ledger) publishUntilGone(client *http.Client, addr, token string, aggregates int, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		p := l.next(aggregates)
		a, err := call(client, "POST", "http://"+addr+"/api/events", token, eventBody(p.id, p.agregado))
		l.mu.Lock()
		switch {
		case err != nil:
			l.doubt = append(l.doubt, p) // the server is gone: we cannot know
		case a.status == http.StatusCreated || (p.retry && a.status == http.StatusOK):
			if a.eventID != p.id {
				l.problems = append(l.problems, fmt.Sprintf("publish %s answered the record of %q", p.id, a.eventID))
			}
			if _, dup := l.acked[p.id]; dup {
				l.problems = append(l.problems, fmt.Sprintf("event %s acknowledged twice as new", p.id))
			}
			l.acked[p.id] = p.agregado
			if p.retry {
				l.retried++
				if a.status == http.StatusOK {
					l.existed++
				}
			}
		default:
			l.problems = append(l.problems, fmt.Sprintf("publish %s (resent: %v): %d %s", p.id, p.retry, a.status, a.body))
			l.doubt = append(l.doubt, p)
		}
		l.mu.Unlock()
		l.answered.ring()
		if err != nil || (a.status != http.StatusCreated && a.status != http.StatusOK) {
			return
		}
	}
}

func TestRepeatedKill9UnderPublishAndDeliveryLoad(t *testing.T) {
	sqliteOnly(t)
	const (
		kills      = 4 // below app.MaxQuedas: a row in flight at every kill must not become poison
		publishers = 16
		aggregates = 5
	)
	if kills >= app.MaxQuedas {
		t.Fatalf("kills (%d) must stay below MaxQuedas (%d)", kills, app.MaxQuedas)
	}
	began := time.Now()
	data := t.TempDir()
	flags := []string{"--insecure-callbacks"}
	healthy, flaky := newCAD(), newCAD()
	flaky.flaky.Store(true)
	cadA, cadB := httptest.NewServer(healthy), httptest.NewServer(flaky)
	defer cadA.Close()
	defer cadB.Close()

	srv := launch{data: data, flags: flags}.start(t)
	if !srv.alive() {
		t.Fatalf("geohub did not start:\n%s", srv.out)
	}
	bin, _ := plainBinary()
	out, err := cli(t, nil, bin, "token", "create", "--papel", "admin", "--data", data)
	if err != nil {
		t.Fatalf("token create: %v %s", err, out)
	}
	token := lastLine(out)
	client := &http.Client{Timeout: 15 * time.Second}
	integrators := map[string]*cad{
		registerCAD(t, client, srv.addr, token, "CAD saudavel", cadA.URL): healthy,
		registerCAD(t, client, srv.addr, token, "CAD instavel", cadB.URL): flaky,
	}

	t.Logf("setup: %v", time.Since(began).Round(time.Millisecond))
	l := newLedger()
	for cycle := 0; ; cycle++ {
		before, cycleStart := l.count(), time.Now()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range publishers {
			wg.Go(func() { l.publishUntilGone(client, srv.addr, token, aggregates, stop) })
		}
		if cycle == kills {
			// The last life: settle every publish left in doubt, add some
			// more, and stop publishing.
			l.await(t, srv, 30*time.Second, "last cycle: 100 more acknowledged, none in doubt", func() bool {
				return l.count() >= before+100 && l.unresolved() == 0
			})
			close(stop)
			wg.Wait()
			t.Logf("last life: %d more acknowledged in %v, every publish in doubt settled",
				l.count()-before, time.Since(cycleStart).Round(time.Millisecond))
			break
		}
		// Kill at a random point: after a random number of acknowledged
		// publishes, plus a random delay, with deliveries in flight.
		target := before + 50 + rand.IntN(400)
		l.await(t, srv, 30*time.Second, fmt.Sprintf("cycle %d: %d publishes acknowledged", cycle, target-before),
			func() bool { return l.count() >= target })
		// Wall time on purpose: the kill lands at a random point of the load.
		time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
		srv.kill()
		wg.Wait()
		reqA, _, _, _ := healthy.stats()
		reqB, failB, _, _ := flaky.stats()
		killed := time.Now()
		srv = launch{data: data, flags: flags}.start(t)
		if !srv.alive() {
			t.Fatalf("geohub did not restart after kill %d:\n%s", cycle+1, srv.out)
		}
		t.Logf("kill %d after %v of load: %d acknowledged, %d in doubt; the receivers had %d and %d requests (%d answered 500); restart took %v",
			cycle+1, killed.Sub(cycleStart).Round(time.Millisecond), l.count(), l.unresolved(), reqA, reqB, failB,
			time.Since(killed).Round(time.Millisecond))
	}
	l.mu.Lock()
	for _, p := range l.problems {
		t.Error(p)
	}
	acked := l.acked
	t.Logf("%d publishes acknowledged over %d kills; %d resent after a lost answer, %d of them already stored",
		len(acked), kills, l.retried, l.existed)
	l.mu.Unlock()
	loadDone := time.Now()

	// Drain: the flaky receiver keeps failing for 3 s more (deliveries lag
	// behind publishes under load, so most of its failures and retries
	// happen now), then accepts everything; retries are due within 1 s (the
	// integrators' backoff).
	time.AfterFunc(3*time.Second, func() { flaky.flaky.Store(false) })
	want := 2 * len(acked) // jornada:* has audience "todos": both integrators get every event
	base := "http://" + srv.addr + "/api/entregas?limite=1&status="
	waitFor(t, 45*time.Second, fmt.Sprintf("%d deliveries entregue", want), func() (bool, string) {
		delivered, err1 := total(client, base+app.EntregaEntregue, token)
		failed, err2 := total(client, base+app.EntregaFalhou, token)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if failed > 0 {
			rows := listAll[app.Delivery](t, client, "http://"+srv.addr+"/api/entregas?status=falhou", token)
			t.Fatalf("%d deliveries dead-lettered (none should: a 500 is retried, and %d kills cannot make a row poison); first: %+v",
				failed, kills, rows[0])
		}
		if !srv.alive() {
			t.Fatalf("the server died while draining, %d of %d delivered", delivered, want)
		}
		return delivered == want, fmt.Sprintf("%d entregue", delivered)
	})
	drained := time.Now()

	// The API's view: every acknowledged event listed once, nothing else.
	type listed struct {
		EventID  string `json:"event_id"`
		Agregado string `json:"agregado"`
	}
	seen := map[string]bool{}
	for _, ev := range listAll[listed](t, client, "http://"+srv.addr+"/api/events", token) {
		if seen[ev.EventID] {
			t.Errorf("GET /api/events lists %s twice", ev.EventID)
		}
		seen[ev.EventID] = true
		if _, ok := acked[ev.EventID]; !ok {
			t.Errorf("GET /api/events lists %s, which no publisher sent", ev.EventID)
		}
	}
	if len(seen) != len(acked) {
		t.Errorf("GET /api/events lists %d events, %d were acknowledged", len(seen), len(acked))
	}
	checkDLQ(t, client, srv.addr, token)
	srv.stop()

	// The file's view, read after the server exited.
	db := openReadOnly(t, data)
	checkIntegrity(t, db)
	inLog := logIDs(t, db)
	if len(inLog) != len(acked) {
		t.Errorf("the log holds %d events; %d were acknowledged (every publish left in doubt was settled)", len(inLog), len(acked))
	}
	for id, agg := range acked {
		if got, ok := inLog[id]; !ok {
			t.Errorf("acknowledged event %s is not in the log", id)
		} else if got != agg {
			t.Errorf("event %s: agregado %q in the log, %q published", id, got, agg)
		}
	}

	type row struct {
		id                   int64
		eventID, integ, agg  string
		seq, sequence        int64
		status               string
		tentativas, attempts int
		quedas, successes    int
	}
	rows, err := db.Query(`SELECT o.id, o.event_id, o.integrador_id, o.agregado, o.sequencia, o.sequence_number,
			o.status, o.tentativas, o.quedas,
			(SELECT count(*) FROM delivery_attempt a WHERE a.outbox_id = o.id),
			(SELECT count(*) FROM delivery_attempt a WHERE a.outbox_id = o.id AND a.status_code BETWEEN 200 AND 299)
		FROM outbox o ORDER BY o.sequence_number`)
	if err != nil {
		t.Fatal(err)
	}
	perEvent := map[string]int{}
	groups := map[[2]string][]row{}
	maxQuedas, crashed := 0, 0
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.eventID, &r.integ, &r.agg, &r.seq, &r.sequence, &r.status, &r.tentativas,
			&r.quedas, &r.attempts, &r.successes); err != nil {
			t.Fatal(err)
		}
		perEvent[r.eventID]++
		groups[[2]string{r.integ, r.agg}] = append(groups[[2]string{r.integ, r.agg}], r)
		maxQuedas = max(maxQuedas, r.quedas)
		if r.quedas > 0 {
			crashed++
		}
		if r.status != app.EntregaEntregue {
			t.Errorf("outbox row %d (%s → %s) ends %s", r.id, r.eventID, r.integ, r.status)
		}
		if r.successes < 1 || r.tentativas != r.attempts {
			t.Errorf("outbox row %d: %d successful attempts recorded, tentativas %d for %d recorded attempts",
				r.id, r.successes, r.tentativas, r.attempts)
		}
		if r.agg != inLog[r.eventID] {
			t.Errorf("outbox row %d: agregado %q, the event's is %q", r.id, r.agg, inLog[r.eventID])
		}
		if c := integrators[r.integ]; c == nil {
			t.Errorf("outbox row %d goes to unknown integrator %s", r.id, r.integ)
		} else if !c.accepted(r.eventID, r.agg, r.seq) {
			t.Errorf("outbox row %d (%s, %s #%d) never reached its receiver with a 2xx", r.id, r.eventID, r.agg, r.seq)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	for id := range inLog {
		if perEvent[id] != len(integrators) {
			t.Errorf("event %s has %d outbox rows; want one per integrator (%d)", id, perEvent[id], len(integrators))
		}
	}
	// Per (integrator, aggregate): 1..n in the order of the log, no gap, no
	// repeat, and the stored counter agrees.
	for k, g := range groups {
		for i, r := range g {
			if r.seq != int64(i+1) {
				t.Errorf("%s/%s: the %d-th event (sequence_number %d) has sequencia %d", k[0], k[1], i+1, r.sequence, r.seq)
				break
			}
		}
		var ultima int64
		if err := db.QueryRow("SELECT ultima FROM outbox_sequence WHERE integrador_id = ? AND agregado = ?",
			k[0], k[1]).Scan(&ultima); err != nil || ultima != int64(len(g)) {
			t.Errorf("%s/%s: outbox_sequence.ultima = %d (%v); %d rows", k[0], k[1], ultima, err, len(g))
		}
	}
	// Consumers: the binary subscribes none, so there are no cursors and no
	// DLQ rows here; TestConsumerAfterRepeatedKill9 kills a server that has
	// one.
	var dlq, cursors, orphan int
	db.QueryRow("SELECT count(*) FROM dead_letter_queue").Scan(&dlq)
	db.QueryRow("SELECT count(*) FROM consumer_cursor").Scan(&cursors)
	db.QueryRow(`SELECT count(*) FROM consumer_cursor WHERE last_sequence > (SELECT coalesce(max(sequence_number), 0) FROM event_log)`).Scan(&orphan)
	if dlq != 0 || orphan != 0 {
		t.Errorf("DLQ rows %d, cursors past the log %d (of %d)", dlq, orphan, cursors)
	}

	reqA, _, reA, _ := healthy.stats()
	reqB, failB, reB, attB := flaky.stats()
	t.Logf("healthy receiver: %d requests, %d events delivered more than once; flaky: %d requests, %d answered 500, %d delivered more than once, up to attempt %d",
		reqA, reA, reqB, failB, reB, attB)
	t.Logf("%d outbox rows were in flight at a kill (the most kills one row saw: %d); %d (integrator, aggregate) sequences checked",
		crashed, maxQuedas, len(groups))
	t.Logf("timing: load with %d kills %v, drain %v, total %v", kills, loadDone.Sub(began).Round(time.Millisecond),
		drained.Sub(loadDone).Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// ---------------------------------------------------------------------------
// 2. A read-only data directory.

func TestReadOnlyDataDirAtStart(t *testing.T) {
	sqliteOnly(t)
	cred, box, bin := unprivileged(t)
	run := func(data string) *child { return launch{bin: bin, data: data, cred: cred}.start(t) }

	t.Run("missing, in an unwritable parent", func(t *testing.T) {
		parent := filepath.Join(box, "parent")
		os.Mkdir(parent, 0o500)
		chownTree(t, parent, cred)
		data := filepath.Join(parent, "data")
		out := run(data).refused("data directory cannot be created")
		t.Logf("missing directory in an unwritable parent: %s", strings.TrimSpace(out))
		if !strings.Contains(out, data) {
			t.Errorf("the error does not name %s:\n%s", data, out)
		}
		if entries, _ := os.ReadDir(parent); len(entries) != 0 {
			t.Errorf("created %v", entries)
		}
	})

	t.Run("empty and unwritable", func(t *testing.T) {
		data := filepath.Join(box, "vazio")
		os.Mkdir(data, 0o500)
		chownTree(t, data, cred)
		out := run(data).refused("unwritable empty data directory")
		t.Logf("empty unwritable directory: %s", strings.TrimSpace(out))
		if !strings.Contains(out, data) {
			t.Errorf("the error does not name %s:\n%s", data, out)
		}
		if entries, _ := os.ReadDir(data); len(entries) != 0 {
			t.Errorf("created %v", entries)
		}
	})

	// A data directory with a database, stopped cleanly (no -wal file left).
	data := filepath.Join(box, "dados")
	os.Mkdir(data, 0o700)
	chownTree(t, data, cred)
	srv := run(data)
	if !srv.alive() {
		t.Fatalf("geohub did not start on a writable directory:\n%s", srv.out)
	}
	tok, err := cli(t, cred, bin, "token", "create", "--papel", "admin", "--data", data)
	if err != nil {
		t.Fatalf("token create: %v %s", err, tok)
	}
	token := lastLine(tok)
	client := &http.Client{Timeout: 10 * time.Second}
	var ids []string
	for range 5 {
		id := newEventID()
		if a, err := call(client, "POST", "http://"+srv.addr+"/api/events", token, eventBody(id, "")); err != nil || a.status != 201 {
			t.Fatalf("publish: %v %d %s", err, a.status, a.body)
		}
		ids = append(ids, id)
	}
	srv.stop()

	t.Run("database and directory read-only", func(t *testing.T) {
		setMode(t, data, 0o500, 0o400)
		defer setMode(t, data, 0o700, 0o600)
		before := snapshot(t, data)
		out := run(data).refused("read-only database")
		t.Logf("read-only database and directory: %s", strings.TrimSpace(out))
		if !strings.Contains(out, data) {
			t.Errorf("the error does not name the data directory or its files (%s):\n%s", data, out)
		}
		sameSnapshot(t, "read-only start", before, snapshot(t, data))
	})

	t.Run("writable database in a read-only directory", func(t *testing.T) {
		// SQLite must create geohub.db-wal and -shm beside the database.
		setMode(t, data, 0o500, 0o600)
		defer setMode(t, data, 0o700, 0o600)
		before := snapshot(t, data)
		out := run(data).refused("read-only directory")
		t.Logf("writable database in a read-only directory: %s", strings.TrimSpace(out))
		if !strings.Contains(out, data) {
			t.Errorf("the error does not name the data directory (%s):\n%s", data, out)
		}
		sameSnapshot(t, "read-only directory start", before, snapshot(t, data))
	})

	// Write access back: it starts, with every event.
	srv = run(data)
	if !srv.alive() {
		t.Fatalf("geohub did not start once the directory was writable again:\n%s", srv.out)
	}
	for _, id := range ids {
		if a, err := call(client, "GET", "http://"+srv.addr+"/api/events/"+id, token, ""); err != nil || a.status != 200 {
			t.Errorf("event %s after the refused starts: %v %d", id, err, a.status)
		}
	}
	srv.stop()
	checkIntegrity(t, openReadOnly(t, data))
}

// TestReadOnlyDataDirWhileRunning takes write permission away from the data
// directory and its files under a loaded server, then crashes it. Permissions
// are checked when a file is opened, and the server holds the database, its
// -wal and -shm open from the start, so it goes on committing: what must hold
// is that every 2xx is stored as answered, any refusal is a clear 5xx, a
// second process and the restart after the crash refuse clearly without
// touching a file, and write access back brings everything back intact.
// (Writes that fail on an open file are the disk-full tests' business; a
// read-only remount is refused by the kernel while files are open for
// writing, so it cannot be staged here.)
func TestReadOnlyDataDirWhileRunning(t *testing.T) {
	sqliteOnly(t)
	cred, box, bin := unprivileged(t)
	data := filepath.Join(box, "dados")
	os.Mkdir(data, 0o700)
	chownTree(t, data, cred)
	srv := launch{bin: bin, data: data, cred: cred}.start(t)
	if !srv.alive() {
		t.Fatalf("geohub did not start:\n%s", srv.out)
	}
	tok, err := cli(t, cred, bin, "token", "create", "--papel", "admin", "--data", data)
	if err != nil {
		t.Fatalf("token create: %v %s", err, tok)
	}
	token := lastLine(tok)
	client := &http.Client{Timeout: 15 * time.Second}

	var mu sync.Mutex
	acked := map[string][]byte{} // event id → the record the 201 answered
	var refused, lost, reads, readFailures atomic.Int64
	var problems []string
	stop := make(chan struct{})
	// The reader reads once per acknowledged publish: at the load's pace,
	// without taking the CPU from the publishers.
	published := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				id := newEventID()
				a, err := call(client, "POST", "http://"+srv.addr+"/api/events", token, eventBody(id, "jornada:equipe-1"))
				mu.Lock()
				switch {
				case err != nil:
					lost.Add(1) // the kill below: unknown outcome
				case a.status == http.StatusCreated:
					acked[id] = a.body
					select {
					case published <- struct{}{}:
					default:
					}
				default:
					refused.Add(1)
					if err := clearServerError(a); err != nil {
						problems = append(problems, "publish on a read-only directory: "+err.Error())
					}
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	// A reader too: new read connections may open while the files are
	// read-only.
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-published:
			}
			a, err := call(client, "GET", "http://"+srv.addr+"/api/events?limite=50", token, "")
			if err != nil {
				return
			}
			reads.Add(1)
			if a.status != 200 {
				readFailures.Add(1)
				if err := clearServerError(a); err != nil {
					mu.Lock()
					problems = append(problems, "read on a read-only directory: "+err.Error())
					mu.Unlock()
				}
			}
		}
	})
	waitAcked := func(n int) {
		waitFor(t, 30*time.Second, fmt.Sprintf("%d publishes acknowledged", n), func() (bool, string) {
			mu.Lock()
			got := len(acked)
			mu.Unlock()
			if !srv.alive() {
				t.Fatalf("the server died with %d publishes acknowledged\n%s", got, srv.out)
			}
			return got >= n, fmt.Sprintf("%d", got)
		})
	}
	waitAcked(50)
	setMode(t, data, 0o500, 0o400) // under the running server
	mu.Lock()
	atFlip := len(acked)
	mu.Unlock()
	t.Cleanup(func() { setMode(t, data, 0o700, 0o600) })
	// Writes still work through the open files, but a restart would fail:
	// readiness says so.
	if a, err := call(client, "GET", "http://"+srv.addr+"/readyz", "", ""); err != nil ||
		a.status != http.StatusServiceUnavailable || !strings.Contains(string(a.body), "sem permissão de escrita") {
		t.Errorf("/readyz on a read-only data directory: %v %d %s", err, a.status, a.body)
	}

	// A second process cannot open it, and says why.
	if out, err := cli(t, cred, bin, "token", "create", "--papel", "leitor", "--data", data); err == nil {
		t.Errorf("token create succeeded on a read-only data directory: %s", out)
	} else if !strings.Contains(out, data) {
		t.Errorf("token create on a read-only directory: the error does not name %s: %s", data, out)
	}
	// Keep the load on the read-only directory for 200 more publishes and
	// 20 more reads, then crash.
	readsAtFlip := reads.Load()
	waitAcked(atFlip + 200)
	waitFor(t, 30*time.Second, "20 reads on the read-only directory", func() (bool, string) {
		return reads.Load() >= readsAtFlip+20, fmt.Sprintf("%d", reads.Load()-readsAtFlip)
	})
	srv.kill()
	close(stop)
	wg.Wait()
	mu.Lock()
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("read-only under the running server: %d publishes acknowledged before the flip, %d after; %d refused; %d lost to the kill; %d reads, %d failed",
		atFlip, len(acked)-atFlip, refused.Load(), lost.Load(), reads.Load(), readFailures.Load())
	mu.Unlock()

	// The crashed server's directory is still read-only: a restart refuses
	// clearly and touches nothing.
	before := snapshot(t, data)
	out := launch{bin: bin, data: data, cred: cred}.start(t).refused("restart on a read-only directory")
	if !strings.Contains(out, data) {
		t.Errorf("the error does not name the data directory or its files (%s):\n%s", data, out)
	}
	sameSnapshot(t, "restart on a read-only directory", before, snapshot(t, data))

	// Write access back: a restart recovers every acknowledged event intact.
	setMode(t, data, 0o700, 0o600)
	srv = launch{bin: bin, data: data, cred: cred}.start(t)
	if !srv.alive() {
		t.Fatalf("geohub did not restart with write access back:\n%s", srv.out)
	}
	for id, rec := range acked {
		a, err := call(client, "GET", "http://"+srv.addr+"/api/events/"+id, token, "")
		if err != nil || a.status != 200 {
			t.Fatalf("acknowledged event %s: %v %d", id, err, a.status)
		}
		if !bytes.Equal(bytes.TrimSpace(a.body), bytes.TrimSpace(rec)) {
			t.Errorf("event %s stored as\n%s\nacknowledged as\n%s", id, a.body, rec)
		}
	}
	if n, err := total(client, "http://"+srv.addr+"/api/events?limite=1", token); err != nil || n < len(acked) {
		t.Errorf("the log holds %d events (%v), %d acknowledged", n, err, len(acked))
	}
	id := newEventID()
	if a, err := call(client, "POST", "http://"+srv.addr+"/api/events", token, eventBody(id, "")); err != nil || a.status != 201 {
		t.Errorf("publish after recovery: %v %d %s", err, a.status, a.body)
	}
	srv.stop()
	db := openReadOnly(t, data)
	checkIntegrity(t, db)
	logIDs(t, db)
}

// ---------------------------------------------------------------------------
// 3. Disk full.

func TestDiskFullAtStart(t *testing.T) {
	sqliteOnly(t)
	data := t.TempDir()
	// 64 KiB: the master key fits, the schema's first transaction does not.
	srv := launch{data: data, fsize: 64 << 10}.start(t)
	out := srv.refused("no room for the database")
	if !strings.Contains(out, data) {
		t.Errorf("the error does not name the data directory or its files (%s):\n%s", data, out)
	}
	t.Logf("start with RLIMIT_FSIZE 64 KiB: %s", strings.TrimSpace(out))

	// With room, the same directory starts and its database is sound.
	srv = launch{data: data}.start(t)
	if !srv.alive() {
		t.Fatalf("geohub did not start once there was room:\n%s", srv.out)
	}
	srv.stop()
	checkIntegrity(t, openReadOnly(t, data))
}

func TestDiskFullWhileRunning(t *testing.T) {
	sqliteOnly(t)
	t.Run("RLIMIT_FSIZE", func(t *testing.T) {
		data := t.TempDir()
		diskFullWhileRunning(t, data, func(srv *child) (func(), error) {
			// Room for a few more commits: the WAL only grows until its first
			// checkpoint, far away on a fresh database.
			var room int64
			for _, f := range []string{store.FileName, store.FileName + "-wal"} {
				if fi, err := os.Stat(filepath.Join(data, f)); err == nil {
					room = max(room, fi.Size())
				}
			}
			pid := srv.cmd.Process.Pid
			if err := setFileSizeLimit(pid, uint64(room+64<<10)); err != nil {
				return nil, err
			}
			return func() { setFileSizeLimit(pid, ^uint64(0)) }, nil
		}, func(srv *child) error {
			// If the WAL had been reset and still has room, no file grows:
			// a limit below every write offset fails them all.
			return setFileSizeLimit(srv.cmd.Process.Pid, 1)
		})
	})
	t.Run("tmpfs", func(t *testing.T) {
		mnt := t.TempDir()
		if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=16m,mode=0700"); err != nil {
			t.Skipf("cannot mount a tmpfs here (%v): the RLIMIT_FSIZE case covers a full disk", err)
		}
		t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
		data := filepath.Join(mnt, "dados")
		filler := filepath.Join(mnt, "enchimento")
		fill := func(*child) (func(), error) {
			f, err := os.Create(filler)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			buf := make([]byte, 64<<10)
			for {
				if _, err := f.Write(buf); err != nil {
					if errors.Is(err, syscall.ENOSPC) {
						break
					}
					return nil, err
				}
			}
			// The last partial pages too.
			for _, n := range []int{4096, 512, 1} {
				for {
					if _, err := f.Write(buf[:n]); err != nil {
						break
					}
				}
			}
			return func() { os.Remove(filler) }, nil
		}
		diskFullWhileRunning(t, data, fill, nil)
	})
}

// diskFullWhileRunning publishes under load, makes the disk full (fill)
// mid-run, checks the failures, frees the space and checks recovery: without
// a restart, and after one, with every acknowledged event intact and every
// delivery made. harder, if set, makes writes fail for sure when fill alone
// did not within a few seconds.
func diskFullWhileRunning(t *testing.T, data string, fill func(*child) (func(), error), harder func(*child) error) {
	began := time.Now()
	rec := newCAD()
	cadSrv := httptest.NewServer(rec)
	defer cadSrv.Close()
	flags := []string{"--insecure-callbacks"}
	srv := launch{data: data, flags: flags}.start(t)
	if !srv.alive() {
		t.Fatalf("geohub did not start:\n%s", srv.out)
	}
	bin, _ := plainBinary()
	tok, err := cli(t, nil, bin, "token", "create", "--papel", "admin", "--data", data)
	if err != nil {
		t.Fatalf("token create: %v %s", err, tok)
	}
	token := lastLine(tok)
	client := &http.Client{Timeout: 15 * time.Second}
	if a, err := call(client, "POST", "http://"+srv.addr+"/api/integradores", token, `{"nome":"CAD","callback_url":"`+
		cadSrv.URL+`/eventos","hosts_permitidos":["127.0.0.1"],"backoff":["1s","1s","1s","1s","1s","1s","1s","1s","1s","1s","1s","1s"]}`); err != nil || a.status != 201 {
		t.Fatalf("create integrator: %v %d %s", err, a.status, a.body)
	}

	var mu sync.Mutex
	acked := map[string][]byte{}
	var failedIDs []string
	var problems []string
	var firstRefusal []byte
	var fails, consecutive atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				id := newEventID()
				a, err := call(client, "POST", "http://"+srv.addr+"/api/events", token, eventBody(id, "jornada:equipe-1"))
				mu.Lock()
				switch {
				case err != nil:
					problems = append(problems, fmt.Sprintf("publish %s: %v (the server must answer)", id, err))
				case a.status == http.StatusCreated:
					acked[id] = a.body
					consecutive.Store(0)
				default:
					fails.Add(1)
					consecutive.Add(1)
					failedIDs = append(failedIDs, id)
					if err := clearServerError(a); err != nil {
						problems = append(problems, "publish on a full disk: "+err.Error())
					} else if a.status != http.StatusServiceUnavailable || a.codigo != string(app.EUnavailable) {
						// The store reports a storage failure as such (503,
						// retry later), not as an internal error.
						problems = append(problems, fmt.Sprintf("publish on a full disk: %d %s; want 503 indisponivel", a.status, a.body))
					}
					if len(firstRefusal) == 0 {
						firstRefusal = a.body
					}
				}
				mu.Unlock()
				if err != nil {
					return
				}
				if a.status != http.StatusCreated {
					// Wall time on purpose: a client backing off.
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	wait := func(ok func() bool, d time.Duration) bool {
		return storetest.Poll(d, func() bool { return ok() || !srv.alive() }) && ok()
	}
	if !wait(func() bool { return count() >= 100 }, 30*time.Second) {
		t.Fatalf("only %d publishes acknowledged before the fault; alive: %v\n%s", count(), srv.alive(), srv.out)
	}
	free, err := fill(srv)
	if err != nil {
		t.Fatalf("make the disk full: %v", err)
	}
	full := count()
	if !wait(func() bool { return consecutive.Load() >= 50 }, 5*time.Second) && harder != nil {
		t.Logf("writes still succeed after the disk filled; making every write fail")
		if err := harder(srv); err != nil {
			t.Fatal(err)
		}
	}
	if !wait(func() bool { return consecutive.Load() >= 50 }, 15*time.Second) {
		free()
		t.Fatalf("publishes did not fail on a full disk: %d acknowledged since, %d failed; alive: %v\n%s",
			count()-full, fails.Load(), srv.alive(), srv.out)
	}
	mu.Lock()
	afterFull := len(acked) - full
	mu.Unlock()
	// Alive, and it said what happened.
	if a, err := call(client, "GET", "http://"+srv.addr+"/healthz", "", ""); err != nil || a.status != 200 {
		t.Errorf("/healthz on a full disk: %v %d", err, a.status)
	}
	ready, _ := call(client, "GET", "http://"+srv.addr+"/readyz", "", "")
	var st syscall.Statfs_t
	fullFS := syscall.Statfs(data, &st) == nil && st.Bavail*uint64(cmp.Or(st.Frsize, st.Bsize)) < 1<<20
	if fullFS &&
		(ready.status != http.StatusServiceUnavailable || !strings.Contains(string(ready.body), "sem espaço")) {
		// A full filesystem, not only a process limit: readiness must see
		// it, from the file check or from the writer's own failing write.
		t.Errorf("/readyz on a full disk: %d %s", ready.status, ready.body)
	}
	logged := srv.out.String()
	if !strings.Contains(logged, "request failed") {
		t.Errorf("the server logged no error for the failed publishes:\n%s", logged)
	}

	// Space back: the running server recovers without a restart.
	free()
	recovered := wait(func() bool { return consecutive.Load() == 0 }, 20*time.Second)
	close(stop)
	wg.Wait()
	mu.Lock()
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("disk full under load: %d acknowledged after the disk filled, %d refused, the first with %s; /readyz answered %d %s; recovered without restart: %v",
		afterFull, fails.Load(), bytes.TrimSpace(firstRefusal), ready.status, bytes.TrimSpace(ready.body), recovered)
	mu.Unlock()
	if !recovered {
		t.Errorf("publishes still fail 20 s after space came back:\n%s", srv.out)
	}
	if a, err := call(client, "GET", "http://"+srv.addr+"/readyz", "", ""); err != nil || a.status != http.StatusOK {
		t.Errorf("/readyz once space came back: %v %d %s", err, a.status, a.body)
	}
	for _, line := range strings.Split(srv.out.String(), "\n") {
		if strings.Contains(line, "request failed") {
			t.Logf("first error logged: %s", line)
			break
		}
	}

	// A failed publish may or may not have been stored (a failed fsync
	// leaves that open); resending it settles it either way.
	storedAnyway := 0
	for _, id := range failedIDs {
		a, err := call(client, "POST", "http://"+srv.addr+"/api/events", token, eventBody(id, "jornada:equipe-1"))
		if err != nil || (a.status != 201 && a.status != 200) {
			t.Fatalf("resend %s after recovery: %v %d %s", id, err, a.status, a.body)
		}
		if a.status == 200 {
			storedAnyway++
		}
		acked[id] = nil
	}
	t.Logf("%d refused publishes resent: %d had been stored despite the error", len(failedIDs), storedAnyway)

	// kill -9 and restart: everything acknowledged is there, as it was
	// acknowledged, and every delivery is made.
	srv.kill()
	srv = launch{data: data, flags: flags}.start(t)
	if !srv.alive() {
		t.Fatalf("geohub did not restart:\n%s", srv.out)
	}
	for id, rec := range acked {
		a, err := call(client, "GET", "http://"+srv.addr+"/api/events/"+id, token, "")
		if err != nil || a.status != 200 {
			t.Fatalf("acknowledged event %s after the restart: %v %d", id, err, a.status)
		}
		if rec != nil && !bytes.Equal(bytes.TrimSpace(a.body), bytes.TrimSpace(rec)) {
			t.Errorf("event %s stored as\n%s\nacknowledged as\n%s", id, a.body, rec)
		}
	}
	base := "http://" + srv.addr + "/api/entregas?limite=1&status="
	// Two minutes: under RLIMIT_FSIZE thousands may have been acknowledged
	// before writes failed, and the machine may be busy; only a failure
	// waits that long.
	if !wait(func() bool {
		n, err := total(client, base+app.EntregaEntregue, token)
		return err == nil && n == len(acked)
	}, 2*time.Minute) {
		n, _ := total(client, base+app.EntregaEntregue, token)
		f, _ := total(client, base+app.EntregaFalhou, token)
		t.Fatalf("%d of %d deliveries made (%d dead-lettered) after the restart", n, len(acked), f)
	}
	srv.stop()
	db := openReadOnly(t, data)
	checkIntegrity(t, db)
	if inLog := logIDs(t, db); len(inLog) != len(acked) {
		t.Errorf("the log holds %d events, %d acknowledged (failed ones resent)", len(inLog), len(acked))
	}
	for id := range acked {
		if !rec.delivered(id) {
			t.Errorf("event %s never reached the receiver with a 2xx", id)
		}
	}
	var n, maxSeq int
	db.QueryRow("SELECT count(*), coalesce(max(sequencia), 0) FROM outbox").Scan(&n, &maxSeq)
	if n != len(acked) || maxSeq != n {
		t.Errorf("outbox: %d rows, last sequencia %d: want %d, gapless", n, maxSeq, len(acked))
	}
	t.Logf("timing: %v", time.Since(began).Round(time.Millisecond))
}
