package redact

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// testKey stands for the derived key (keys.Redaction, pinned in
// app/keys_test.go); redact cannot import app, and any 32 bytes do here.
var testKey = bytes.Repeat([]byte{0x11}, 32)

func decode(t testing.TB, s string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return m
}

func marshal(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return string(b)
}

// hmacOf is an independent reference for the hash format.
func hmacOf(key []byte, b string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(b))
	return "hmac-sha256:" + hex.EncodeToString(m.Sum(nil))
}

var hashMarker = regexp.MustCompile(`\$H\(([^)]*)\)`)

// expand replaces $H(bytes) in an expected JSON with the hash of bytes.
func expand(want string) string {
	return hashMarker.ReplaceAllStringFunc(want, func(m string) string {
		return hmacOf(testKey, hashMarker.FindStringSubmatch(m)[1])
	})
}

func mustCompile(t testing.TB, r Rules) *Program {
	t.Helper()
	p, err := Compile(r)
	if err != nil {
		t.Fatalf("Compile(%+v): %v", r, err)
	}
	return p
}

func TestApply(t *testing.T) {
	const jornada = `{
		"jornadaId": "j-1", "inicio": "2024-05-01T08:00:00Z",
		"servidor": {"cpf": "123.456.789-00", "nome": "Ana", "telefone": "+55 11 99999-0000"},
		"local": {"lat": -23.5505, "lng": -46.63339, "precisao": 12}
	}`
	tests := []struct {
		name    string
		payload string
		rules   Rules
		want    string
	}{
		{
			name:    "spec example",
			payload: jornada,
			rules:   Rules{Manter: []string{"/jornadaId", "/inicio"}, Hash: []string{"/servidor/cpf"}, Arredondar: []string{"/local"}},
			want:    `{"inicio":"2024-05-01T08:00:00Z","jornadaId":"j-1","local":{"lat":-23.551,"lng":-46.633},"servidor":{"cpf":"$H(123.456.789-00)"}}`,
		},
		{
			name:    "no rules keeps nothing",
			payload: jornada,
			want:    `{}`,
		},
		{
			name: "everything not named is dropped",
			payload: `{"cpf":"1","nome":"Ana","telefone":"2",
				"a":{"cpf":"3","nome":"Bia","telefone":"4","ok":true,
					"b":{"cpf":"5","nome":"Caio","telefone":"6","c":[{"cpf":"7","nome":"Di","telefone":"8"}]}}}`,
			rules: Rules{Manter: []string{"/a/ok"}},
			want:  `{"a":{"ok":true}}`,
		},
		{
			name:    "manter keeps subtrees verbatim",
			payload: `{"a":{"x":[1,{"y":null}],"n":1.50},"b":2}`,
			rules:   Rules{Manter: []string{"/a"}},
			want:    `{"a":{"n":1.50,"x":[1,{"y":null}]}}`,
		},
		{
			name:    "root keeps everything",
			payload: `{"a":{"x":[1,{"y":null}]},"b":"<&>"}`,
			rules:   Rules{Manter: []string{""}},
			want:    `{"a":{"x":[1,{"y":null}]},"b":"\u003c\u0026\u003e"}`,
		},
		{
			name:    "root keep plus hash and arredondar",
			payload: jornada,
			rules:   Rules{Manter: []string{""}, Hash: []string{"/servidor/cpf", "/servidor/telefone"}, Arredondar: []string{"/local"}},
			want:    `{"inicio":"2024-05-01T08:00:00Z","jornadaId":"j-1","local":{"lat":-23.551,"lng":-46.633},"servidor":{"cpf":"$H(123.456.789-00)","nome":"Ana","telefone":"$H(+55 11 99999-0000)"}}`,
		},
		{
			name:    "root keep drops what arredondar cannot round",
			payload: `{"a":"x","l":[1.23456,"s",2],"k":1}`,
			rules:   Rules{Manter: []string{""}, Arredondar: []string{"/a", "/l/*"}},
			want:    `{"k":1,"l":[1.235,null,2]}`,
		},
		{
			name:    "transform wins over manter at and below it",
			payload: `{"a":{"b":"x","c":"y"},"d":"z"}`,
			rules:   Rules{Manter: []string{"/a/b", "/d"}, Hash: []string{"/a", "/d"}},
			want:    `{"a":"$H({"b":"x","c":"y"})","d":"$H(z)"}`,
		},
		{
			name:    "hash of non-strings is their compact JSON",
			payload: `{"n":1.50,"i":10,"b":false,"z":null,"o":{"b":[1, 2],"a":"<x>"},"l":["a",1]}`,
			rules:   Rules{Hash: []string{"/n", "/i", "/b", "/z", "/o", "/l"}},
			want:    `{"b":"$H(false)","i":"$H(10)","l":"$H(["a",1])","n":"$H(1.50)","o":"$H({"a":"<x>","b":[1,2]})","z":"$H(null)"}`,
		},
		{
			name:    "equal values hash equally across fields",
			payload: `{"a":"same","b":{"c":"same"}}`,
			rules:   Rules{Hash: []string{"/a", "/b/c"}},
			want:    `{"a":"$H(same)","b":{"c":"$H(same)"}}`,
		},
		{
			name: "arredondar numbers",
			payload: `{"a":-23.5505,"b":10,"c":1.0005,"d":-0.0004,"e":9.9995,"f":1e-7,"g":1.234567e2,
				"h":2.5e0,"i":0.1000,"j":-0.0005,"k":123456789012345678901234567890.12345,"l":1.2344999}`,
			rules: Rules{Arredondar: []string{"/a", "/b", "/c", "/d", "/e", "/f", "/g", "/h", "/i", "/j", "/k", "/l"}},
			want:  `{"a":-23.551,"b":10,"c":1.001,"d":0,"e":10,"f":0,"g":123.457,"h":2.5e0,"i":0.1000,"j":-0.001,"k":123456789012345678901234567890.123,"l":1.234}`,
		},
		{
			name: "arredondar fails closed",
			payload: `{"s":"-23.5","l":[1.5],"o":{"x":1},"half":{"lat":1},"str":{"lat":"1","lng":2},
				"t":true,"z":null,"p":{"lat":1.00049,"lng":2,"acc":5}}`,
			rules: Rules{Arredondar: []string{"/s", "/l", "/o", "/half", "/str", "/t", "/z", "/p"}},
			want:  `{"p":{"lat":1,"lng":2}}`,
		},
		{
			name:    "star keeps members of every element",
			payload: `{"itens":[{"id":1,"cpf":"a"},{"id":2,"cpf":"b"},{"id":3}]}`,
			rules:   Rules{Manter: []string{"/itens/*/id"}, Hash: []string{"/itens/*/cpf"}},
			want:    `{"itens":[{"cpf":"$H(a)","id":1},{"cpf":"$H(b)","id":2},{"id":3}]}`,
		},
		{
			name:    "elements that keep nothing are null, trailing ones cut",
			payload: `{"itens":[{"x":1},{"id":2},{"x":3},{"id":4},{"x":5}]}`,
			rules:   Rules{Manter: []string{"/itens/*/id"}},
			want:    `{"itens":[null,{"id":2},null,{"id":4}]}`,
		},
		{
			name:    "indices keep input positions",
			payload: `{"l":["a","b","c","d"]}`,
			rules:   Rules{Manter: []string{"/l/2", "/l/0", "/l/9", "/l/-", "/l/01"}},
			want:    `{"l":["a",null,"c"]}`,
		},
		{
			name:    "star and index rules merge on an element",
			payload: `{"l":[{"a":1,"b":2,"c":3},{"a":4,"b":5,"c":6}]}`,
			rules:   Rules{Manter: []string{"/l/*/a", "/l/1/b"}, Hash: []string{"/l/0/c"}},
			want:    `{"l":[{"a":1,"c":"$H(3)"},{"a":4,"b":5}]}`,
		},
		{
			name:    "star over arrays of scalars and nested arrays",
			payload: `{"m":[[1,2],[3],"x"],"h":["a","b"]}`,
			rules:   Rules{Manter: []string{"/m/*/0"}, Hash: []string{"/h/*"}},
			want:    `{"h":["$H(a)","$H(b)"],"m":[[1],[3]]}`,
		},
		{
			name:    "star on an object is the literal key",
			payload: `{"o":{"*":1,"a":{"id":2}},"n":{"0":"zero","01":"one"}}`,
			rules:   Rules{Manter: []string{"/o/*", "/o/*/id", "/n/0", "/n/01"}},
			want:    `{"n":{"0":"zero","01":"one"},"o":{"*":1}}`,
		},
		{
			name:    "missing paths and paths through scalars are skipped",
			payload: `{"a":"str","b":[1],"c":{"d":null}}`,
			rules:   Rules{Manter: []string{"/x", "/a/b", "/b/0/c", "/c/d/e", "/c/e"}, Hash: []string{"/y", "/a/0"}, Arredondar: []string{"/z/w"}},
			want:    `{}`,
		},
		{
			name:    "kept null",
			payload: `{"c":{"d":null}}`,
			rules:   Rules{Manter: []string{"/c/d"}},
			want:    `{"c":{"d":null}}`,
		},
		{
			name:    "keys with slash and tilde",
			payload: `{"a/b":1,"m~n":2,"~1":3,"/":{"~":4},"a":{"b":5}}`,
			rules:   Rules{Manter: []string{"/a~1b", "/m~0n", "/~01"}, Hash: []string{"/~1/~0"}},
			want:    `{"/":{"~":"$H(4)"},"a/b":1,"m~n":2,"~1":3}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := marshal(t, mustCompile(t, tt.rules).Apply(testKey, decode(t, tt.payload)))
			if want := expand(tt.want); got != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}

func TestHashKeySensitivity(t *testing.T) {
	p := mustCompile(t, Rules{Hash: []string{"/cpf"}})
	in := decode(t, `{"cpf":"123"}`)
	a := p.Apply(testKey, in)["cpf"]
	b := p.Apply(testKey, in)["cpf"]
	c := p.Apply(bytes.Repeat([]byte{0x22}, 32), in)["cpf"]
	if a != b {
		t.Errorf("same key, different hashes: %v %v", a, b)
	}
	if a == c {
		t.Errorf("different keys, same hash: %v", a)
	}
	if a != hmacOf(testKey, "123") {
		t.Errorf("hash %v is not HMAC-SHA256 of the UTF-8 bytes", a)
	}
}

func TestApplyDoesNotMutateOrAlias(t *testing.T) {
	const src = `{"a":{"b":[1,{"c":"x"}],"cpf":"1"},"l":{"lat":1.23456,"lng":2,"x":0},"n":[{"id":1,"s":2}]}`
	in := decode(t, src)
	before := marshal(t, in)
	for _, r := range []Rules{
		{Manter: []string{""}, Hash: []string{"/a/cpf"}, Arredondar: []string{"/l"}},
		{Manter: []string{"/a", "/n/*/id"}, Hash: []string{"/a/b/1/c"}},
	} {
		out := mustCompile(t, r).Apply(testKey, in)
		if got := marshal(t, in); got != before {
			t.Fatalf("input mutated:\n%s\n%s", before, got)
		}
		// Writing through the output must not reach the input.
		scribble(out)
		if got := marshal(t, in); got != before {
			t.Fatalf("output aliases input:\n%s\n%s", before, got)
		}
	}
}

func scribble(v any) {
	switch c := v.(type) {
	case map[string]any:
		for k, x := range c {
			scribble(x)
			c[k] = "scribbled"
		}
		c["new"] = true
	case []any:
		for i, x := range c {
			scribble(x)
			c[i] = "scribbled"
		}
	}
}

func TestApplyNilAndEmpty(t *testing.T) {
	var nilProg *Program
	if got := marshal(t, nilProg.Apply(testKey, decode(t, `{"a":1}`))); got != `{}` {
		t.Errorf("nil program: %s", got)
	}
	p := mustCompile(t, Rules{Manter: []string{""}})
	if got := marshal(t, p.Apply(testKey, nil)); got != `{}` {
		t.Errorf("nil payload: %s", got)
	}
	p = mustCompile(t, Rules{Manter: []string{"/a"}})
	if got := p.Apply(testKey, nil); got == nil {
		t.Error("nil result")
	}
}

func TestApplyUnusualValues(t *testing.T) {
	// Not produced by UseNumber, but must not panic or leak.
	in := map[string]any{
		"f": 1.23456, "bad": json.Number("1..2"), "nan": json.Number("NaN"),
		"h": json.Number("01"), "keep": []any{json.Number("x")},
	}
	p := mustCompile(t, Rules{Arredondar: []string{"/f", "/bad", "/nan"}, Hash: []string{"/h", "/keep"}})
	got := p.Apply(testKey, in)
	if !reflect.DeepEqual(got, map[string]any{"f": json.Number("1.235")}) {
		t.Errorf("got %#v", got)
	}
}

func TestApplyDeepNesting(t *testing.T) {
	const depth = 5000
	src := strings.Repeat(`{"a":`, depth) + `"x"` + strings.Repeat(`}`, depth)
	ptr := strings.Repeat("/a", depth)
	p := mustCompile(t, Rules{Manter: []string{"", ptr[:len(ptr)/2]}, Hash: []string{ptr}})
	out := p.Apply(testKey, decode(t, src))
	if !strings.Contains(marshal(t, out), hmacOf(testKey, "x")) {
		t.Error("deep value not hashed")
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name  string
		rules Rules
		paths []string
	}{
		{"relative pointer", Rules{Hash: []string{"cpf"}}, []string{"/hash/0"}},
		{"second entry", Rules{Manter: []string{"/ok", "x"}}, []string{"/manter/1"}},
		{"root in hash", Rules{Hash: []string{""}}, []string{"/hash/0"}},
		{"root in arredondar", Rules{Arredondar: []string{""}}, []string{"/arredondar/0"}},
		{"empty token", Rules{Manter: []string{"/a//b"}}, []string{"/manter/0"}},
		{"slash only", Rules{Manter: []string{"/"}}, []string{"/manter/0"}},
		{"trailing slash", Rules{Manter: []string{"/a/"}}, []string{"/manter/0"}},
		{"bad escape", Rules{Hash: []string{"/a~2"}}, []string{"/hash/0"}},
		{"dangling tilde", Rules{Hash: []string{"/ok", "/a~"}}, []string{"/hash/1"}},
		{"hash overlaps arredondar", Rules{Hash: []string{"/a"}, Arredondar: []string{"/a/lat"}}, []string{"/arredondar/0"}},
		{"arredondar overlaps hash", Rules{Hash: []string{"/x", "/a/lat"}, Arredondar: []string{"/b", "/a"}}, []string{"/arredondar/1"}},
		{"star overlaps index", Rules{Hash: []string{"/p/*/x"}, Arredondar: []string{"/p/0"}}, []string{"/arredondar/0"}},
		{"same path", Rules{Hash: []string{"/a"}, Arredondar: []string{"/a"}}, []string{"/arredondar/0"}},
		{"all listed in order", Rules{Manter: []string{"a", "/ok"}, Hash: []string{"", "/b~"}, Arredondar: []string{"c"}},
			[]string{"/manter/0", "/hash/0", "/hash/1", "/arredondar/0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Compile(tt.rules)
			if p != nil || err == nil {
				t.Fatalf("Compile accepted %+v", tt.rules)
			}
			var errs RuleErrors
			if !errors.As(err, &errs) {
				t.Fatalf("error %T is not RuleErrors", err)
			}
			var paths []string
			for _, e := range errs {
				paths = append(paths, e.Path)
				if e.Reason == "" {
					t.Errorf("%s: empty reason", e.Path)
				}
			}
			if !reflect.DeepEqual(paths, tt.paths) {
				t.Errorf("paths %v, want %v (%v)", paths, tt.paths, err)
			}
		})
	}
}

func TestCompileAccepts(t *testing.T) {
	for _, r := range []Rules{
		{},
		{Manter: []string{"", "", "/a", "/a"}},
		{Hash: []string{"/a", "/a", "/a/b"}, Arredondar: []string{"/p/*", "/p/0", "/q"}},
		{Hash: []string{"/p/*/x"}, Arredondar: []string{"/p/*/y", "/p/01", "/o/*"}, Manter: []string{"/p"}},
		{Manter: []string{"/~0~1/-/*/0"}},
	} {
		if _, err := Compile(r); err != nil {
			t.Errorf("Compile(%+v): %v", r, err)
		}
	}
}

func TestRulesWireForm(t *testing.T) {
	var r Rules
	if err := json.Unmarshal([]byte(`{"manter":["/jornadaId","/inicio"],"hash":["/servidor/cpf"],"arredondar":["/local"]}`), &r); err != nil {
		t.Fatal(err)
	}
	want := Rules{Manter: []string{"/jornadaId", "/inicio"}, Hash: []string{"/servidor/cpf"}, Arredondar: []string{"/local"}}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("got %+v", r)
	}
	if got := marshal(t, Rules{Hash: []string{"/a"}}); got != `{"hash":["/a"]}` {
		t.Errorf("marshal: %s", got)
	}
}
