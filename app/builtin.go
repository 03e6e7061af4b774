package app

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
)

// BuiltinTypeFiles holds the built-in plugins' event types, one file per
// type version under tipos/, in the body shape of POST /api/registro:
// ocorrencia:* (the ocorrência plugin), integracao:* (command outcomes) and
// jornada:* (published by producers).
//
// A file, once released, never changes: data directories hold its content
// under its version and the log holds events validated against it, so a
// changed file would only be a conflict at every start (see
// RegisterBuiltinTypes). A tighter schema is a new file with a new version,
// beside the old one (testdata/builtin-versions holds each one's digest).
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
// no-op. A version already registered with other content (by an admin,
// before an upgrade brought it built in) cannot change, since events were
// validated against it: it is returned in conflicts for the caller to
// report, and the server still starts; the plugin refuses what the stored
// schema refuses.
//
// The versions the built-in plugins publish (pluginFamilies) are protected
// from then on: deprecating one would make every command fail (SetStatus
// refuses it). One deprecated before this protection existed is made
// active again and returned in reactivated.
func RegisterBuiltinTypes(ctx context.Context, r *Registry) (conflicts, reactivated []string, err error) {
	types, err := BuiltinTypes()
	if err != nil {
		return nil, nil, err
	}
	for _, tv := range types {
		key := tv.Tipo + "@" + tv.Versao
		stored, _, err := r.Register(ctx, tv)
		switch {
		case ErrorCode(err) == EConflict:
			conflicts = append(conflicts, key)
			stored, err = r.version(tv.Tipo, tv.Versao)
		case err != nil:
			return conflicts, reactivated, fmt.Errorf("register built-in type %s: %w", key, err)
		}
		if err != nil {
			return conflicts, reactivated, err
		}
		if !publishedByPlugin(tv.Tipo) {
			continue // jornada:* come from outside; an admin may retire a version
		}
		r.protect(key)
		if stored.Status == StatusDeprecado {
			if _, err := r.SetStatus(ctx, tv.Tipo, tv.Versao, StatusAtivo); err != nil {
				return conflicts, reactivated, fmt.Errorf("reactivate built-in type %s: %w", key, err)
			}
			reactivated = append(reactivated, key)
		}
	}
	return conflicts, reactivated, nil
}

// pluginFamilies are the event families only built-in plugins publish, and
// the aggregates they own: an ocorrência's state is the fold of its events,
// so an event there from outside the plugin would bypass its state machines
// (and could claim or corrupt another integrator's ocorrência); an outcome
// is the answer to a command, which only the command API gives.
var pluginFamilies = []string{"ocorrencia:", "integracao:"}

// publishedByPlugin says whether only a built-in plugin publishes tipo.
func publishedByPlugin(tipo string) bool {
	for _, f := range pluginFamilies {
		if strings.HasPrefix(tipo, f) {
			return true
		}
	}
	return false
}
