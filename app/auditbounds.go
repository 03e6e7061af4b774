package app

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// The trail is append-only and kept forever, so what one request can add
// to it is bounded: a refused request's path, a name or a refusal's text
// is the caller's to choose, and a leitor's 403 on a 1 MB path once stored
// a 1 MB row. Each text is cut to a number of characters (clip, ending in
// "…"), a field's value past its bound is kept as the start of its JSON
// text, and an entry keeps at most auditFieldsMax fields.
const (
	auditTextMax   = 512  // characters of ids, names, addresses, actions, targets
	auditDetailMax = 4096 // characters of a refusal's message with its findings
	auditValueMax  = 4096 // bytes of one field's value, as JSON
	auditFieldsMax = 32
)

// Bounded is e cut to the trail's bounds; the stores write only this.
func (e AuditEntry) Bounded() AuditEntry {
	for _, s := range []*string{&e.Quem.Tipo, &e.Quem.ID, &e.Quem.Nome, &e.Endereco, &e.Acao,
		&e.Alvo.Tipo, &e.Alvo.ID, &e.Alvo.Nome, &e.Resultado} {
		*s = clip(*s, auditTextMax)
	}
	e.Detalhe = clip(e.Detalhe, auditDetailMax)
	if len(e.Campos) > auditFieldsMax {
		omitted := len(e.Campos) - auditFieldsMax + 1
		e.Campos = append(e.Campos[:auditFieldsMax-1:auditFieldsMax-1], Set("campos_omitidos", omitted))
	} else {
		e.Campos = append([]AuditField(nil), e.Campos...)
	}
	for i := range e.Campos {
		f := &e.Campos[i]
		f.Campo = clip(f.Campo, auditTextMax)
		f.De, f.Para = cutValue(f.De), cutValue(f.Para)
	}
	return e
}

// Size is about what e takes stored and encoded: pages of the trail stop at
// AuditPageBytes by it.
func (e AuditEntry) Size() int {
	n := 256 + len(e.Quem.Tipo) + len(e.Quem.ID) + len(e.Quem.Nome) + len(e.Endereco) + len(e.Acao) +
		len(e.Alvo.Tipo) + len(e.Alvo.ID) + len(e.Alvo.Nome) + len(e.Resultado) + len(e.Codigo) + len(e.Detalhe)
	for _, f := range e.Campos {
		n += 32 + len(f.Campo) + len(f.De) + len(f.Para)
	}
	return n
}

// cutValue keeps a value past auditValueMax as a JSON string holding the
// start of its text and its size: still readable, no longer the value.
func cutValue(v json.RawMessage) json.RawMessage {
	if len(v) <= auditValueMax {
		return v
	}
	note := fmt.Sprintf(" (valor de %d bytes, cortado)", len(v))
	b, _ := json.Marshal(clip(string(v), auditValueMax/2) + note)
	return b
}

// refusalLimit bounds the refusals one actor can add to the trail from the
// edges (a role that does not allow a route, a form without its CSRF
// token): those cost the caller one cheap request each, and a leitor's
// script could otherwise fill the disk with rows nobody may delete. Past
// the budget a refusal is still answered, only not recorded; the next one
// recorded says how many were not.
const (
	refusalBudget = 30 // per address per window
	// credentialRefusalBudget is a credential's, past the edges'
	// Refusals: it records every refusal they let through.
	credentialRefusalBudget = RefusalBurst + 60
	refusalWindow           = time.Minute
)

type refusalLimiter struct {
	mu     sync.Mutex
	actors map[string]*refusalCount
}

type refusalCount struct {
	since   time.Time
	n       int
	dropped int
}

// admit says whether the refusal of key at now is recorded, and how many
// of key's refusals before it were not.
func (l *refusalLimiter) admit(key string, now time.Time, budget int) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.actors == nil {
		l.actors = map[string]*refusalCount{}
	}
	if len(l.actors) > 4096 {
		// Many actors (addresses of anonymous requests): forget the quiet ones.
		for k, c := range l.actors {
			if now.Sub(c.since) >= refusalWindow && c.dropped == 0 {
				delete(l.actors, k)
			}
		}
	}
	c := l.actors[key]
	if c == nil || now.Sub(c.since) >= refusalWindow {
		dropped := 0
		if c != nil {
			dropped = c.dropped
		}
		l.actors[key] = &refusalCount{since: now, n: 1}
		return true, dropped
	}
	if c.n >= budget {
		c.dropped++
		return false, 0
	}
	c.n++
	dropped := c.dropped
	c.dropped = 0
	return true, dropped
}
