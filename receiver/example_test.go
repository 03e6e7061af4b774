package receiver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"geohub/receiver"
)

// despachos is a CAD projection: the state of EACH despacho, never "the
// ocorrência is on site". The receiver hands it each envelope once, in
// order within its aggregate, so Apply just overwrites.
type despachos struct {
	mu     sync.Mutex
	status map[string]string // despacho id → status
}

func (p *despachos) Apply(_ context.Context, d receiver.Delivery) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch d.Tipo {
	case "ocorrencia:despachada":
		var pl struct {
			Despacho struct{ ID, Status string }
		}
		if err := json.Unmarshal(d.Payload, &pl); err != nil {
			return err // 500: Geohub retries
		}
		p.status[pl.Despacho.ID] = pl.Despacho.Status
	case "ocorrencia:despacho-mudou-status": // arrival is para "no_local"
		var pl struct{ ID, Para string }
		if err := json.Unmarshal(d.Payload, &pl); err != nil {
			return err
		}
		p.status[pl.ID] = pl.Para
	}
	return nil
}

func ExampleNew() {
	secret := []byte("whsec-do-cadastro")
	p := &despachos{status: map[string]string{}}
	r := receiver.New(receiver.Config{
		Secrets: func() [][]byte { return [][]byte{secret} },
		Self:    "id-do-integrador",
	}, p)
	// In production: http.Handle("POST /geohub/eventos", r)

	send := func(seq int, body string) int {
		ts := time.Now().Unix()
		req := httptest.NewRequest(http.MethodPost, "/geohub/eventos", strings.NewReader(body))
		req.Header.Set(receiver.HeaderTimestamp, strconv.FormatInt(ts, 10))
		req.Header.Set(receiver.HeaderAssinatura, receiver.Sign(secret, ts, []byte(body)))
		req.Header.Set(receiver.HeaderAgregado, "ocorrencia:o1")
		req.Header.Set(receiver.HeaderSequencia, strconv.Itoa(seq))
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		return w.Code
	}
	// The arrival (sequence 3) comes before the second dispatch (2): held.
	fmt.Println(send(1, `{"id":"e1","origem":{"plugin":"ocorrencia","versao":"1.0.0"},"payload":{"despacho":{"id":"d1","status":"em_deslocamento"}},"tipo":"ocorrencia:despachada"}`))
	fmt.Println(send(3, `{"id":"e3","origem":{"plugin":"ocorrencia","versao":"1.0.0"},"payload":{"id":"d1","de":"em_deslocamento","para":"no_local"},"tipo":"ocorrencia:despacho-mudou-status"}`))
	fmt.Println(p.status["d1"])
	fmt.Println(send(2, `{"id":"e2","origem":{"plugin":"ocorrencia","versao":"1.0.0"},"payload":{"despacho":{"id":"d2","status":"em_deslocamento"}},"tipo":"ocorrencia:despachada"}`))
	fmt.Println(p.status["d1"], p.status["d2"])
	// Output:
	// 204
	// 204
	// em_deslocamento
	// 204
	// no_local em_deslocamento
}
