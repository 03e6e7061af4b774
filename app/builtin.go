package app

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
)

// BuiltinTypeFiles holds the built-in plugins' event types, one file per
// type version under tipos/, in the body shape of POST /api/registro:
// ocorrencia:* (the ocorrência plugin), integracao:* (command outcomes) and
// jornada:* (published by producers).
//
//go:embed tipos/*.json
var BuiltinTypeFiles embed.FS

// BuiltinTypes returns the types the built-in plugins publish.
func BuiltinTypes() ([]TypeVersion, error) {
	entries, err := fs.ReadDir(BuiltinTypeFiles, "tipos")
	if err != nil {
		return nil, err
	}
	out := make([]TypeVersion, 0, len(entries))
	for _, e := range entries {
		raw, err := fs.ReadFile(BuiltinTypeFiles, "tipos/"+e.Name())
		if err != nil {
			return nil, err
		}
		var tv TypeVersion
		if err := json.Unmarshal(raw, &tv); err != nil {
			return nil, fmt.Errorf("built-in type %s: %w", e.Name(), err)
		}
		out = append(out, tv)
	}
	return out, nil
}

// RegisterBuiltinTypes registers the built-in types at start, so commands
// work on a fresh data directory. Registering identical content again is a
// no-op; a stored version that differs is a conflict worth stopping for.
func RegisterBuiltinTypes(ctx context.Context, r *Registry) error {
	types, err := BuiltinTypes()
	if err != nil {
		return err
	}
	for _, tv := range types {
		if _, _, err := r.Register(ctx, tv); err != nil {
			return fmt.Errorf("register built-in type %s@%s: %w", tv.Tipo, tv.Versao, err)
		}
	}
	return nil
}
