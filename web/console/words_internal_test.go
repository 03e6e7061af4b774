package console

import "testing"

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
