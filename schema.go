// Package geohub holds what belongs to the whole product rather than to one
// layer: the database schema, embedded so the binary carries it.
package geohub

import _ "embed"

// Schema is schema.sql: numbered migration blocks applied in order at open.
//
//go:embed schema.sql
var Schema string
