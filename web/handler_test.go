package web_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"geohub/app"
	"geohub/web"
	"geohub/web/heavy"
	"geohub/web/proxy"

	"geohub/store/storetest"
)

// The API and the console ask app.Public for the status of the same error:
// the same missing or malformed thing answers the same on both edges.
func TestBothEdgesAnswerTheSameStatusForTheSameError(t *testing.T) {
	e := audSetup(t)
	b := e.browser(t, "")
	if status := b.login("admin", audAdminPassword); status != http.StatusSeeOther {
		t.Fatalf("console login: %d", status)
	}
	const unknown = "0199bb3e-0000-7000-8000-00000000ffff"
	for _, c := range []struct{ name, api, console string }{
		{"an unknown event", "/api/events/" + unknown, "/eventos/" + unknown},
		{"an event id that is no uuid", "/api/events/nao-e-uuid", "/eventos/nao-e-uuid"},
		{"an unknown delivery", "/api/entregas/987654", "/entregas/987654"},
		{"a delivery id that is no number", "/api/entregas/abc", "/entregas/abc"},
		{"an unknown integrator", "/api/integradores/" + unknown, "/integradores/" + unknown},
		{"an unknown ocorrência", "/api/ocorrencias/" + unknown, "/ocorrencias/" + unknown},
		{"an unknown type", "/api/registro/nada:aqui", "/registro/nada:aqui"},
	} {
		t.Run(c.name, func(t *testing.T) {
			api, body := e.api(t, "GET", c.api, e.Tokens[app.PapelAdmin], nil)
			console, page := b.do("GET", c.console, nil)
			if api != console {
				t.Fatalf("API %s: %d (%s); console %s: %d\n%s", c.api, api, body, c.console, console, page)
			}
			if api >= 500 || api < 400 {
				t.Fatalf("both edges answered %d for %s", api, c.name)
			}
		})
	}
}

// serve's edge and a test kit's are the one NewHandler: the API and the
// console share one heavy-read limit of heavy.Total slots and believe the
// same proxies (cmd/geohub checks serve's own edge the same way).
func TestNewHandlerSharesOneLimitAndOneProxyList(t *testing.T) {
	k := storetest.New(t, storetest.Options{Deps: app.Deps{NoDispatch: true}})
	proxies, err := proxy.Parse("10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	h := web.NewHandler(k.Services, web.Options{Ocorrencias: k.Ocorrencias, TrustedProxies: proxies})
	if h.API.Heavy != h.Console.Heavy || h.API.Heavy.Cap() != heavy.Total {
		t.Fatalf("API and console limits: %p (%d) and %p (%d), want one of %d",
			h.API.Heavy, h.API.Heavy.Cap(), h.Console.Heavy, h.Console.Heavy.Cap(), heavy.Total)
	}
	if len(h.API.TrustedProxies) != 1 || len(h.Console.TrustedProxies) != 1 ||
		h.API.TrustedProxies[0] != proxies[0] || h.Console.TrustedProxies[0] != proxies[0] {
		t.Fatalf("trusted proxies: API %v, console %v, want %v", h.API.TrustedProxies, h.Console.TrustedProxies, proxies)
	}
}

// Every kind of error, coded or not, answers the one status app.Public
// gives it on both edges.
func TestBothEdgesRenderAnErrorWithTheStatusAppGivesIt(t *testing.T) {
	k := storetest.New(t, storetest.Options{Deps: app.Deps{NoDispatch: true}})
	h := web.NewHandler(k.Services, web.Options{Ocorrencias: k.Ocorrencias})
	errs := []error{
		app.ErrNotFound,
		fmt.Errorf("integrator x: %w", app.ErrNotFound),
		context.Canceled,
		fmt.Errorf("read page: %w", context.DeadlineExceeded),
		errors.New("disk on fire"),
	}
	for _, code := range []app.Code{app.EInvalid, app.EMalformed, app.ENotFound, app.EConflict, app.EUnauthorized,
		app.EForbidden, app.EMethod, app.ETooLarge, app.ERateLimited, app.EUnavailable, app.EInternal} {
		errs = append(errs, app.Errorf(code, "palavras de %s", code))
	}
	for _, err := range errs {
		want := app.Public(err).Code.HTTPStatus()
		r := httptest.NewRequest("GET", "/x", nil)
		api, console := httptest.NewRecorder(), httptest.NewRecorder()
		h.API.Fail(api, r, err)
		h.Console.Fail(console, r, err)
		if api.Code != want || console.Code != want {
			t.Errorf("%v: API %d, console %d, want %d", err, api.Code, console.Code, want)
		}
	}
	if got := app.Public(fmt.Errorf("x: %w", app.ErrNotFound)).Code; got != app.ENotFound {
		t.Errorf("a wrapped ErrNotFound is %s, want %s", got, app.ENotFound)
	}
}
