package web_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"testing"
	"time"

	"geohub/app"
)

var apiTimeLayout = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// timesIn collects every string of a JSON document that is a timestamp.
func timesIn(v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			timesIn(e, out)
		}
	case []any:
		for _, e := range x {
			timesIn(e, out)
		}
	case string:
		if _, err := time.Parse(time.RFC3339Nano, x); err == nil {
			*out = append(*out, x)
		}
	}
}

// SPEC 6.3 and issue 15: every API timestamp is UTC with exactly three
// decimals, so that the strings sort as the instants do.
func TestAPITimestampsHaveMilliseconds(t *testing.T) {
	t.Parallel()
	env := apiSetupWithDispatcher(t)
	env.delRegisterTypes(t)
	rc := delNewReceiver(t, http.StatusNoContent)
	a := env.delCreateIntegrator(t, rc, "CAD Polícia")
	env.delPublish(t, "lote:1", 1)
	env.waitRecorded(t, "a delivery", func() bool { return env.delList(t, "status=entregue").Total == 1 })
	var seen []string
	for _, route := range []string{"/api/integradores", "/api/integradores/" + a.ID, "/api/events", "/api/entregas",
		"/api/entregas/1", "/api/registro"} {
		res := env.do(t, http.MethodGet, route, app.PapelAdmin, nil).want(t, http.StatusOK)
		var doc any
		if err := json.Unmarshal(res.Body, &doc); err != nil {
			t.Fatal(err)
		}
		var times []string
		timesIn(doc, &times)
		for _, s := range times {
			if !apiTimeLayout.MatchString(s) {
				t.Errorf("%s: timestamp %q is not UTC with milliseconds", route, s)
			}
		}
		seen = append(seen, times...)
	}
	if len(seen) < 8 {
		t.Fatalf("only %d timestamps checked: %v", len(seen), seen)
	}
}
