// Package storetest builds, for tests, the service graph `geohub serve`
// runs (app.New, the ocorrência plugin, Start), on a real SQLite file in
// the test's temporary directory or, when GEOHUB_TEST_BACKEND=postgres, on
// a fresh database of the test PostgreSQL server, with one clock for the
// store and every service. The HTTP edges (web.Server, console.Console) stay in their
// packages' kits, which build them from the Kit's fields.
package storetest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"

	"geohub/app"
	"geohub/app/ocorrencia"
	"geohub/store"
	"geohub/store/postgres"
)

// Options are what a kit varies. Deps.Store is the kit's own database;
// every other Deps field is passed to app.New as given, except that a nil
// MasterKey is 32 zero bytes, a zero PasswordCost bcrypt's least and a nil Registerer a fresh registry (the
// Kit's Gatherer), so metrics are recorded as in production.
type Options struct {
	app.Deps
	// Postgres, when set, is the URL of a PostgreSQL database the kit opens
	// whatever Backend says: kits given the same URL are replicas.
	Postgres string
	// At, when set, is a database Location returned, which the kit opens
	// as it stands instead of an empty one: a restart, once the kit that
	// ran on it is closed (Kit.Close), or a database a test filled first.
	// Unlike Postgres it follows Backend, so such a test runs on both.
	At string
	// BuiltinTypes registers the built-in event types, as serve does.
	BuiltinTypes bool
	// AdminPassword, when set, creates the admin operator with it.
	AdminPassword string
	// Subscribe registers more in-process consumers, and Tune adjusts the
	// services (the dispatcher's jitter, say), both before Start.
	Subscribe func(*app.Consumers)
	Tune      func(*app.Services)
	// BeforeProject is the ocorrência read model's hook (see
	// ocorrencia.Service).
	BeforeProject func(ctx context.Context, ev app.Event) error
}

// Kit is a running graph. The test's cleanup stops the services, then
// closes the database; kits built on it register their own cleanups later,
// so those (HTTP servers, live tails) run first.
type Kit struct {
	*app.Services
	DB          Store // *store.DB or *postgres.DB, as Backend says
	Ocorrencias *ocorrencia.Service
	Gatherer    prometheus.Gatherer // the registry metrics go to, unless Options set one
}

// New builds and starts the graph; it fails the test on any error.
func New(t testing.TB, o Options) *Kit {
	t.Helper()
	ctx := context.Background()
	var db Store
	switch {
	case o.Postgres != "":
		db = OpenPostgres(t, o.Postgres, o.Now)
	case o.At != "":
		db = OpenAt(t, o.At, o.Now)
	default:
		db = Open(t, o.Now)
	}
	d := o.Deps
	d.Store = db
	if d.MasterKey == nil {
		d.MasterKey = make([]byte, 32)
	}
	if d.PasswordCost == 0 {
		// bcrypt's least: the default costs most of a second a hash under
		// the race detector, and many tests sign in.
		d.PasswordCost = bcrypt.MinCost
	}
	k := &Kit{DB: db}
	if d.Registerer == nil {
		reg := prometheus.NewRegistry()
		d.Registerer, k.Gatherer = reg, reg
	}
	svc, err := app.New(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	k.Services = svc
	if o.BuiltinTypes {
		if _, _, err := app.RegisterBuiltinTypes(ctx, svc.Registry); err != nil {
			t.Fatal(err)
		}
	}
	if o.AdminPassword != "" {
		if _, _, err := svc.Auth.EnsureAdmin(ctx, o.AdminPassword); err != nil {
			t.Fatal(err)
		}
	}
	k.Ocorrencias = ocorrencia.New(svc, db)
	k.Ocorrencias.BeforeProject = o.BeforeProject
	if o.Subscribe != nil {
		o.Subscribe(svc.Consumers)
	}
	if o.Tune != nil {
		o.Tune(svc)
	}
	t.Cleanup(svc.Stop)
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return k
}

// Close stops the services and closes the database now, as a shutdown
// does, so that a test can open the same database again (Options.At); the
// cleanup then finds nothing left to do.
func (k *Kit) Close() error {
	k.Stop()
	return k.DB.Close()
}

// Store is what a kit's database is: the services' store and the
// ocorrência read model.
type Store interface {
	app.Store
	ocorrencia.ReadModel
	Close() error
}

// Open opens an empty database on the backend Backend names, closed at the
// test's cleanup.
func Open(t testing.TB, now func() time.Time) Store {
	t.Helper()
	return OpenAt(t, Location(t), now)
}

// Location is where a new, empty database of the test's own is, on the
// backend Backend names: a file path in the test's temporary directory
// (SQLite) or the URL of a fresh database dropped at cleanup (PostgreSQL).
// Opening it (OpenAt, Options.At) creates the schema; opening it again
// after closing finds what was stored, as a restart does.
func Location(t testing.TB) string {
	t.Helper()
	switch b := Backend(); b {
	case "sqlite":
		return filepath.Join(t.TempDir(), store.FileName)
	case "postgres":
		return PostgresDatabase(t)
	default:
		t.Fatalf("GEOHUB_TEST_BACKEND=%q: want sqlite or postgres", b)
		return ""
	}
}

// OpenAt opens the database at loc, a Location, on the backend Backend
// names, closed at the test's cleanup; closing it earlier is allowed.
func OpenAt(t testing.TB, loc string, now func() time.Time) Store {
	t.Helper()
	if Backend() == "postgres" {
		return OpenPostgres(t, loc, now)
	}
	db, err := store.Open(context.Background(), loc, store.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return closed(t, db)
}

// OpenPostgres opens the PostgreSQL database at url (one replica of it),
// closed at the test's cleanup.
func OpenPostgres(t testing.TB, url string, now func() time.Time) Store {
	t.Helper()
	db, err := postgres.Open(context.Background(), url, postgres.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return closed(t, db)
}

func closed(t testing.TB, db Store) Store {
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("close database: %v", err)
		}
	})
	return db
}
