//go:build linux

package web_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"github.com/google/uuid"

	"geohub/app"
	"geohub/store/storetest"
	"geohub/web"
	"geohub/web/heavy"
)

// Responses that carry stored records hold memory while they are written,
// and a reader that stops holds it: at most HeavyPerCredential of them run
// at once per token, so one token's stalled readers neither take the
// server's memory nor the other tokens' reads, and a slot comes back when
// its reader goes away.
func TestStalledReadersOfOneTokenAreBoundedAndLeaveTheOthersAlone(t *testing.T) {
	ctx := t.Context()
	k := storetest.New(t, storetest.Options{BuiltinTypes: true, Deps: app.Deps{NoDispatch: true}})
	hs := httptest.NewServer(web.NewHandler(k.Services, web.Options{Ocorrencias: k.Ocorrencias}))
	t.Cleanup(hs.Close)
	token := func(p app.Papel) string {
		secret, _, err := k.Auth.CreateToken(ctx, p, "teste-"+string(p))
		if err != nil {
			t.Fatal(err)
		}
		return secret
	}
	admin, leitor := token(app.PapelAdmin), token(app.PapelLeitor)
	get := func(bearer, path string) (int, []byte) {
		req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+bearer)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	// 40 events of 900 KB: a replay far larger than what the sockets buffer.
	var last string
	for range 40 {
		last = uuid.NewString()
		body, _ := json.Marshal(map[string]any{"event_id": last, "tipo": "jornada:iniciada", "origem": "rh",
			"payload": map[string]any{"jornadaId": last, "inicio": "2026-12-02T12:00:00Z",
				"servidor": map[string]any{"nome": "Ana", "cpf": "52998224725"}, "unidade": strings.Repeat("u", 900_000)}})
		req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL+"/api/events", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+admin)
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != http.StatusCreated {
			t.Fatalf("publish: %v %v", err, res)
		}
		res.Body.Close()
	}

	// The leitor's script opens replays and reads nothing.
	var stalled []net.Conn
	for range heavy.PerCredential {
		// A small receive buffer from the SYN on: the window it announces
		// stays small, so the server's writes block early.
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		}}
		c, err := d.DialContext(ctx, "tcp", hs.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "GET /api/events/replay?de_sequence=0 HTTP/1.1\r\nHost: geohub\r\nAuthorization: Bearer %s\r\n\r\n", leitor)
		// Its status line, and no more: once the answer has begun, its
		// handler holds its slot until the replay is written.
		status := make([]byte, len("HTTP/1.1 200"))
		if _, err := io.ReadFull(c, status); err != nil || string(status) != "HTTP/1.1 200" {
			t.Fatalf("stalled replay %d: %q %v", len(stalled), status, err)
		}
		stalled = append(stalled, c)
	}
	// Its next read is refused at once, with when to come back...
	probe := "/api/events/" + last
	if status, b := get(leitor, probe); status != http.StatusTooManyRequests || !strings.Contains(string(b), `"limite_de_taxa"`) {
		t.Fatalf("with %d stalled replays of one token its next read got %d, want 429 limite_de_taxa (%.200s)", heavy.PerCredential, status, b)
	}
	// ...while another token reads as ever.
	if status, b := get(admin, probe); status != http.StatusOK {
		t.Fatalf("another token's read got %d: %.200s", status, b)
	}
	// A stalled reader that goes away gives its slot back.
	for _, c := range stalled {
		c.Close()
	}
	// The server notices the closed connections in its own time.
	storetest.Eventually(t, "the token's read to get 200 after its readers closed", func() bool {
		status, _ := get(leitor, probe)
		return status == http.StatusOK
	})
}
