package app

import (
	"geohub/app/callback"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Operators read why an attempt failed in pt-BR; Go's text stays after it.
func TestTransportErrorsSayWhyInPortuguese(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := closed.Addr().String()
	closed.Close()

	hangup, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hangup.Close()
	go func() {
		for {
			c, err := hangup.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 1024)
			c.Read(buf)
			c.Close() // read the request, answer nothing
		}
	}()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // past the client's timeout, but never holding Close for long
		case <-r.Context().Done():
		case <-time.After(2 * time.Second):
		}
	}))
	defer slow.Close()
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer plain.Close()

	client := &http.Client{Timeout: 300 * time.Millisecond}
	for _, c := range []struct{ url, want string }{
		{"http://" + refusedAddr + "/", "conexão recusada"},
		{"http://" + hangup.Addr().String() + "/", "o receptor fechou a conexão sem responder"},
		{slow.URL, "o receptor não respondeu a tempo"},
		{strings.Replace(plain.URL, "http://", "https://", 1), "o receptor não respondeu em TLS"},
	} {
		_, err := client.Post(c.url, "application/json", strings.NewReader("{}"))
		if err == nil {
			t.Fatalf("%s: no error", c.url)
		}
		got := transportError(err).Error()
		if !strings.HasPrefix(got, c.want) || !strings.Contains(got, err.Error()) {
			t.Errorf("%s: %q, want %q and Go's text %q", c.url, got, c.want, err)
		}
	}
	if got := transportError(callback.ErrRefusedAddress).Error(); !strings.HasPrefix(got, "endereço do callback recusado") {
		t.Errorf("refused address: %q", got)
	}
}
