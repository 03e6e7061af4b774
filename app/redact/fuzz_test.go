package redact

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// FuzzApply checks the allowlist invariants on arbitrary payloads and rules:
// no panic, the output marshals, the input is untouched, and every output
// leaf lies under a named path, hashed or rounded when that path says so.
func FuzzApply(f *testing.F) {
	f.Add(`{"jornadaId":"j","inicio":"t","servidor":{"cpf":"1","nome":"A"},"local":{"lat":-23.5505,"lng":-46.6333}}`,
		"/jornadaId\n/inicio", "/servidor/cpf", "/local")
	f.Add(`{"a":[{"id":1,"cpf":"x"},{"id":2},3],"b":{"*":{"c":1.23456}}}`, "/a/*/id\n/a/1", "/a/*/cpf", "/b/*/c")
	f.Add(`{"a/b":{"~":[1,[2,{"x":"y"}]]},"n":1e400}`, "\n/a~1b", "/a~1b/~0/1/1/x", "/n")
	f.Add(`{"l":[[1.0005,-0.0005],{"lat":1,"lng":"2"}]}`, "/l/0", "/l/*/lat", "/l/0/*")
	f.Add(`{}`, "", "", "")
	f.Fuzz(func(t *testing.T, payload, manter, hash, arredondar string) {
		dec := json.NewDecoder(strings.NewReader(payload))
		dec.UseNumber()
		var in map[string]any
		if dec.Decode(&in) != nil {
			return
		}
		r := Rules{Manter: lines(manter), Hash: lines(hash), Arredondar: lines(arredondar)}
		p, err := Compile(r)
		if err != nil {
			errs, ok := err.(RuleErrors)
			if !ok || len(errs) == 0 {
				t.Fatalf("Compile error %T %v", err, err)
			}
			return
		}
		before, _ := json.Marshal(in)
		out := p.Apply(testKey, in)
		got, err := json.Marshal(out)
		if err != nil {
			t.Fatalf("output does not marshal: %v", err)
		}
		if after, _ := json.Marshal(in); string(after) != string(before) {
			t.Fatalf("input mutated")
		}
		if again, _ := json.Marshal(p.Apply(testKey, in)); string(again) != string(got) {
			t.Fatalf("not deterministic")
		}
		rules := compilePaths(t, r)
		leaves(out, nil, func(path []seg, v any) {
			checkLeaf(t, rules, path, v)
		})
	})
}

func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// seg is one step of an output path; arr marks an array index.
type seg struct {
	tok string
	arr bool
}

type rulePath struct {
	op   op
	toks []string
}

func compilePaths(t *testing.T, r Rules) []rulePath {
	var out []rulePath
	for o, ptrs := range map[op][]string{opNone: r.Manter, opHash: r.Hash, opRound: r.Arredondar} {
		for _, ptr := range ptrs {
			toks, reason := parsePointer(ptr)
			if reason != "" {
				t.Fatalf("Compile accepted %q: %s", ptr, reason)
			}
			out = append(out, rulePath{o, toks})
		}
	}
	return out
}

// leaves calls fn for every scalar and empty container below the root of
// v; nulls in arrays are index placeholders and skipped.
func leaves(v any, path []seg, fn func([]seg, any)) {
	switch c := v.(type) {
	case map[string]any:
		if len(c) == 0 && len(path) > 0 {
			fn(path, v)
		}
		for k, x := range c {
			leaves(x, append(path[:len(path):len(path)], seg{k, false}), fn)
		}
	case []any:
		if len(c) == 0 {
			fn(path, v)
		}
		for i, x := range c {
			if x != nil {
				leaves(x, append(path[:len(path):len(path)], seg{strconv.Itoa(i), true}), fn)
			}
		}
	default:
		fn(path, v)
	}
}

func prefixOf(rule []string, path []seg) bool {
	if len(rule) > len(path) {
		return false
	}
	for i, r := range rule {
		if r != path[i].tok && !(r == "*" && path[i].arr) {
			return false
		}
	}
	return true
}

func checkLeaf(t *testing.T, rules []rulePath, path []seg, v any) {
	covered := false
	for _, r := range rules {
		if !prefixOf(r.toks, path) {
			continue
		}
		covered = true
		switch r.op {
		case opHash:
			s, ok := v.(string)
			if len(path) != len(r.toks) || !ok || !strings.HasPrefix(s, hashPrefix) {
				t.Fatalf("leaf %v = %#v under hash path %q is not a hash", path, v, r.toks)
			}
		case opRound:
			n, ok := v.(json.Number)
			last := path[len(path)-1].tok
			lat := len(path) == len(r.toks)+1 && (last == "lat" || last == "lng")
			if !ok || !(len(path) == len(r.toks) || lat) {
				t.Fatalf("leaf %v = %#v under arredondar path %q is not rounded", path, v, r.toks)
			}
			if again, _ := round3(string(n)); again != n {
				t.Fatalf("leaf %v = %s is not rounded", path, n)
			}
		}
	}
	if !covered {
		t.Fatalf("leaf %v = %#v is kept but not named by any rule", path, v)
	}
}
