package app_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"geohub/app"
	"geohub/store/storetest"
)

// The built-in plugins publish their types at every command: deprecating
// one is refused with the reason, and one deprecated before this protection
// existed is active again at the next start.
func TestBuiltinTypesCannotBeDeprecated(t *testing.T) {
	ctx := context.Background()
	db := storetest.Open(t, time.Now)
	reg, err := app.NewRegistry(ctx, db, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := app.RegisterBuiltinTypes(ctx, reg); err != nil {
		t.Fatal(err)
	}
	const tipo = "ocorrencia:registrada"
	if _, err := reg.SetStatus(ctx, tipo, "1.0.0", app.StatusDeprecado); app.ErrorCode(err) != app.EConflict {
		t.Fatalf("deprecating a built-in type: %v, want a conflict", err)
	}
	if !reg.Builtin(tipo, "1.0.0") || reg.Builtin("teste:a", "1.0.0") {
		t.Fatal("Builtin does not tell the plugins' versions")
	}

	// As an older binary could leave it: deprecated in the database.
	if err := db.SetTypeStatus(ctx, tipo, "1.0.0", app.StatusDeprecado, nil); err != nil {
		t.Fatal(err)
	}
	reg, err = app.NewRegistry(ctx, db, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	_, reactivated, err := app.RegisterBuiltinTypes(ctx, reg)
	if err != nil || !slices.Equal(reactivated, []string{tipo + "@1.0.0"}) {
		t.Fatalf("reactivated %v, err %v", reactivated, err)
	}
	versions, _ := reg.Versions(tipo)
	if len(versions) != 1 || versions[0].Status != app.StatusAtivo {
		t.Fatalf("after the start: %+v", versions)
	}
}
