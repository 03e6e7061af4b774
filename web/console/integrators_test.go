package console

import (
	"slices"
	"testing"

	"geohub/app"
)

func TestSplitList(t *testing.T) {
	for in, want := range map[string][]string{
		"":                                nil,
		" \n , ":                          nil,
		"a.gov.br":                        {"a.gov.br"},
		"a.gov.br, *.b.gov.br":            {"a.gov.br", "*.b.gov.br"},
		"ocorrencia:*\r\nintegracao:*\n,": {"ocorrencia:*", "integracao:*"},
	} {
		if got := splitList(in); !slices.Equal(got, want) || (want == nil) != (got == nil) {
			t.Errorf("splitList(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestItemizedNamesTheEntryAndJoinsPerField(t *testing.T) {
	err := &app.Error{Code: app.EInvalid, Message: "cadastro de integrador inválido", Details: []app.Detail{
		{Caminho: "/nome", Mensagem: "obrigatório"},
		{Caminho: "/hosts_permitidos/1", Mensagem: "deve ser um nome de host"},
		{Caminho: "/hosts_permitidos/2", Mensagem: "deve ser um nome de host"},
		{Caminho: "/eventos/0", Mensagem: "padrão inválido"},
	}}
	f := form{Values: map[string]string{"nome": "", "hosts_permitidos": "", "eventos": ""}, Errors: map[string]string{}}
	f.take(itemized(err, map[string][]string{"hosts_permitidos": {"ok.gov.br", "a b", "x/y"}, "eventos": {"Errado"}}))
	want := map[string]string{
		"nome":             "obrigatório",
		"hosts_permitidos": `"a b": deve ser um nome de host; "x/y": deve ser um nome de host`,
		"eventos":          `"Errado": padrão inválido`,
	}
	for k, v := range want {
		if f.E(k) != v {
			t.Errorf("%s: %q, want %q", k, f.E(k), v)
		}
	}
	if f.Error != "" {
		t.Errorf("form error %q", f.Error)
	}
	if err.Details[1].Mensagem != "deve ser um nome de host" {
		t.Error("itemized changed the original error")
	}
}

func TestOnceFormsRunsASubmissionOnce(t *testing.T) {
	o := &onceForms{used: map[string]onceUse{}}
	tok := o.issue()
	if _, ok := o.claim(tok); !ok {
		t.Fatal("first claim refused")
	}
	if id, ok := o.claim(tok); ok || id != "" {
		t.Fatalf("claim while the first runs: %q %v", id, ok)
	}
	o.done(tok, "x")
	if id, ok := o.claim(tok); ok || id != "x" {
		t.Fatalf("claim after success: %q %v", id, ok)
	}
	failed := o.issue()
	o.claim(failed)
	o.release(failed)
	if _, ok := o.claim(failed); !ok {
		t.Fatal("a failed submission cannot be sent again")
	}
	if _, ok := o.claim(""); !ok {
		t.Fatal("a form without token was refused")
	}
}
