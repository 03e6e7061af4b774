package console

import (
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
	} {
		got, ok := periodEnd(in)
		if !ok || got.Format(time.RFC3339) != want {
			t.Errorf("periodEnd(%q) = %v %v, want %s", in, got, ok, want)
		}
	}
}
