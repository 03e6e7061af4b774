package console

import (
	"strings"
	"testing"
	"time"
)

func TestWordsForPeople(t *testing.T) {
	for in, want := range map[string]string{"vazamento_gas": "Vazamento de gás", "incendio": "Incêndio",
		"queda_de_poste": "Queda de poste", "": ""} {
		if got := naturezaLabel(in); got != want {
			t.Errorf("naturezaLabel(%q) = %q, want %q", in, got, want)
		}
	}
	for ms, want := range map[int64]string{0: "0 ms", 999: "999 ms", 1000: "1,0 s", 5019: "5,0 s", 12345: "12,3 s"} {
		if got := durationMS(ms); got != want {
			t.Errorf("durationMS(%d) = %q, want %q", ms, got, want)
		}
	}
}

// "Até 14:41" includes 14:41:59; a day, the whole day.
func TestPeriodEndIncludesWhatItNames(t *testing.T) {
	for in, want := range map[string]string{
		"2026-11-30T14:41":    "2026-11-30T14:42:00-03:00",
		"2026-11-30T14:41:05": "2026-11-30T14:41:06-03:00",
		"2026-11-30":          "2026-12-01T00:00:00-03:00",
		// As typed after the error's example, in Brasília.
		"30/11/2026 14:41":    "2026-11-30T14:42:00-03:00",
		"30/11/2026 14:41:05": "2026-11-30T14:41:06-03:00",
		"30/11/2026":          "2026-12-01T00:00:00-03:00",
	} {
		got, ok := periodEnd(in)
		if !ok || got.Format(time.RFC3339) != want {
			t.Errorf("periodEnd(%q) = %v %v, want %s", in, got, ok, want)
		}
	}
}

// The start reads the same forms: the datetime-local input's, and the
// Brazilian one the error's example shows.
func TestParsePeriodReadsBothForms(t *testing.T) {
	for in, want := range map[string]string{
		"2026-11-30T14:00":     "2026-11-30T14:00:00-03:00",
		"2026-11-30T14:00:05":  "2026-11-30T14:00:05-03:00",
		"30/11/2026 14:00":     "2026-11-30T14:00:00-03:00",
		"30/11/2026 14:00:05":  "2026-11-30T14:00:05-03:00",
		"2026-11-30T17:00:00Z": "2026-11-30T14:00:00-03:00",
	} {
		got, ok := parsePeriod(in)
		if !ok || got.In(brt).Format(time.RFC3339) != want {
			t.Errorf("parsePeriod(%q) = %v %v, want %s", in, got, ok, want)
		}
	}
	for _, in := range []string{"ontem", "31/02/2026 14:00", "30/11/26 14:00"} {
		if _, ok := parsePeriod(in); ok {
			t.Errorf("parsePeriod(%q) reads it, want a refusal", in)
		}
	}
	if example, _ := strings.CutPrefix(periodExample, "use dia e hora, como "); example == periodExample {
		t.Errorf("periodExample %q has no example", periodExample)
	} else if _, ok := parsePeriod(example); !ok {
		t.Errorf("the error's example %q does not parse", example)
	}
}

// Codes and backoff steps read in pt-BR, not in Go's words.
func TestStatusAndBackoffForPeople(t *testing.T) {
	for code, want := range map[int]string{503: "503 (serviço indisponível)", 500: "500 (erro interno)", 429: "429 (muitas requisições)", 418: "418"} {
		if got := httpStatus(code); got != want {
			t.Errorf("httpStatus(%d) = %q, want %q", code, got, want)
		}
	}
	if got, want := backoffText([]string{"5s", "30s", "2m", "1h", "1h30m"}), "5 s, 30 s, 2 min, 1 h, 1 h 30 min (6 tentativas)"; got != want {
		t.Errorf("backoffText = %q, want %q", got, want)
	}
	if got := stepText("amanhã"); got != "amanhã" {
		t.Errorf("a step that is no duration shows as typed, got %q", got)
	}
}
