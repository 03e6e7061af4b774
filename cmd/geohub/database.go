package main

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"geohub/app"
	"geohub/app/keys"
	"geohub/app/ocorrencia"
	"geohub/store"
	"geohub/store/postgres"
)

// Database says where a command's data lives (SPEC 12): the embedded
// SQLite under Data by default, or the PostgreSQL database at URL, which
// several replicas share. The master key is Data/master.key for SQLite
// (created at first use), and for PostgreSQL must be given, the same on
// every replica: MasterKeyFile, or GEOHUB_MASTER_KEY in the environment.
type Database struct {
	Data          string
	URL           string
	MasterKeyFile string
}

// databaseFlags registers --data, --db and --master-key-file, which every
// command that opens the database takes.
func databaseFlags(fs *flag.FlagSet, d *Database) {
	fs.StringVar(&d.Data, "data", envOr("GEOHUB_DATA", "./data"),
		"data directory: the SQLite database and its master key, or with --db only local files (env GEOHUB_DATA)")
	fs.StringVar(&d.URL, "db", envOr("GEOHUB_DB", ""),
		"PostgreSQL URL (postgres://…) instead of the embedded SQLite, for several replicas (env GEOHUB_DB)")
	fs.StringVar(&d.MasterKeyFile, "master-key-file", envOr("GEOHUB_MASTER_KEY_FILE", ""),
		"file with the 32-byte master key (raw, or 64 hex digits); required with --db unless GEOHUB_MASTER_KEY holds it (env GEOHUB_MASTER_KEY_FILE)")
}

// Postgres says whether the data lives in PostgreSQL.
func (d Database) Postgres() bool { return d.URL != "" }

// Where names the database for logs and messages, without a password.
func (d Database) Where() string {
	if !d.Postgres() {
		return filepath.Join(d.Data, store.FileName)
	}
	u, err := url.Parse(d.URL)
	if err != nil {
		return "postgres"
	}
	u.User = nil
	u.RawQuery = ""
	return u.String()
}

// Driver names the database driver, for the start log.
func (d Database) Driver() string {
	if d.Postgres() {
		return "pgx"
	}
	return store.DriverName
}

// openedStore is what the commands use of either backend.
type openedStore interface {
	app.Store
	ocorrencia.ReadModel
	Close() error
}

// open opens the database with its migrations applied (and, on SQLite,
// the data directory and master key created on first use and the bodies an
// earlier version stored in clear sealed). With mustExist, a SQLite
// database that is not there yet is an error: the commands that change
// accounts must not create an empty one when --data is mistyped.
func (d Database) open(ctx context.Context, logger *slog.Logger, mustExist bool) (openedStore, []byte, error) {
	if d.Postgres() {
		// The data directory still holds local files (the demo's CAD
		// credentials); the database is elsewhere.
		if err := os.MkdirAll(d.Data, 0o700); err != nil {
			return nil, nil, fmt.Errorf("create data directory: %w", err)
		}
		if !strings.HasPrefix(d.URL, "postgres://") && !strings.HasPrefix(d.URL, "postgresql://") {
			return nil, nil, fmt.Errorf("--db: want a postgres:// URL")
		}
		key, err := d.masterKey()
		if err != nil {
			return nil, nil, err
		}
		db, err := postgres.Open(ctx, d.URL, postgres.Options{})
		if err != nil {
			return nil, nil, fmt.Errorf("open database %s: %w", d.Where(), err)
		}
		if err := d.checkKey(ctx, db, key, logger); err != nil {
			db.Close()
			return nil, nil, err
		}
		return db, key, nil
	}
	if mustExist {
		path := filepath.Join(d.Data, store.FileName)
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("no database at %s: check --data (or --db), or create it with geohub migrate (or a first geohub serve)", path)
		}
	}
	if err := os.MkdirAll(d.Data, 0o700); err != nil {
		return nil, nil, fmt.Errorf("create data directory: %w", err)
	}
	key, err := d.masterKey()
	if err != nil {
		return nil, nil, err
	}
	db, err := store.Open(ctx, filepath.Join(d.Data, store.FileName), store.Options{})
	if err != nil {
		return nil, nil, fmt.Errorf("open database: %w", err)
	}
	// Before anything reads the outbox or copies the file (backup): the
	// bodies an earlier version stored in clear are sealed here, with a
	// key checked first.
	err = d.checkKey(ctx, db, key, logger)
	var sealer *keys.Sealer
	if err == nil {
		sealer, err = keys.NewSealer(key)
	}
	if err == nil {
		err = app.SealStoredBodies(ctx, db, sealer, logger)
	}
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, key, nil
}

// checkKey refuses a master key that is not the database's (see
// app.CheckMasterKey). It runs here, in the one open every command shares,
// rather than in app.New: the commands that change accounts never build
// the services, and on SQLite open seals the bodies an earlier version
// stored in clear, with the key, before app.New runs.
func (d Database) checkKey(ctx context.Context, db app.KeyCheckStore, key []byte, logger *slog.Logger) error {
	// A database about to take its first key takes only a random one; one
	// that already has a weak key keeps working, with a warning at open.
	if why := keys.Weakness(key); why != "" {
		stored, err := db.KeyCheck(ctx)
		if err != nil {
			return fmt.Errorf("read the master key's check: %w", err)
		}
		// New: no check pinned and nothing sealed yet (a database older
		// than the check may hold secrets sealed with this very key).
		samples, err := db.SealedSamples(ctx)
		if err != nil {
			return fmt.Errorf("read what the database holds sealed: %w", err)
		}
		if stored == nil && samples.IntegratorID == "" && samples.EventID == "" {
			return fmt.Errorf("%s, key from %s: refused for a new database: %s; give 32 random bytes (openssl rand -hex 32)",
				d.Where(), d.keySource(), why)
		}
		logger.Warn("the master key is weak; this database keeps it, a new installation must be given 32 random bytes",
			"why", why, "key", d.keySource())
	}
	if err := app.CheckMasterKey(ctx, db, key); err != nil {
		return fmt.Errorf("%s, key from %s: %w", d.Where(), d.keySource(), err)
	}
	return nil
}

// keySource names where masterKey takes the key from.
func (d Database) keySource() string {
	if d.MasterKeyFile != "" {
		return "--master-key-file " + d.MasterKeyFile
	}
	if _, ok := os.LookupEnv("GEOHUB_MASTER_KEY"); ok {
		return "GEOHUB_MASTER_KEY"
	}
	return filepath.Join(d.Data, masterKeyFile)
}

// masterKey reads the key from --master-key-file or GEOHUB_MASTER_KEY; on
// SQLite, without either, from (or into) the data directory. PostgreSQL
// never generates one: replicas that each made their own could not open
// each other's secrets.
func (d Database) masterKey() ([]byte, error) {
	if d.MasterKeyFile != "" {
		if err := privateFile(d.MasterKeyFile); err != nil {
			return nil, fmt.Errorf("--master-key-file: %w", err)
		}
		b, err := os.ReadFile(d.MasterKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--master-key-file: %w", err)
		}
		return parseMasterKey(b, "--master-key-file "+d.MasterKeyFile)
	}
	if v, ok := os.LookupEnv("GEOHUB_MASTER_KEY"); ok {
		return parseMasterKey([]byte(v), "GEOHUB_MASTER_KEY")
	}
	if d.Postgres() {
		return nil, fmt.Errorf("--db needs the master key, the same on every replica: --master-key-file FILE or GEOHUB_MASTER_KEY " +
			"(a SQLite appliance's is DATA/master.key; a new one: openssl rand -hex 32)")
	}
	path := filepath.Join(d.Data, masterKeyFile)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		// A new key beside a database sealed with the old one would open
		// none of its secrets, and hide which key it needs.
		if db := filepath.Join(d.Data, store.FileName); fileExists(db) {
			return nil, fmt.Errorf("%s is missing beside the existing database %s: restore it from the backup made with the database "+
				"(a new key opens none of the secrets sealed with the old one); nothing was written", path, db)
		}
	}
	return masterKey(path)
}

// privateFile refuses a key file that others may read, or anyone but its
// owner (and its group, reading) may change: the master key opens every
// secret at rest.
func privateFile(path string) error {
	if runtime.GOOS == "windows" {
		return nil // no Unix modes: the file's ACL is the operator's to set
	}
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	if perm := info.Mode().Perm(); perm&0o037 != 0 {
		return fmt.Errorf("%s has mode %04o, open to others: chmod 600 %s (0640 for a group that only reads it; "+
			"a Kubernetes secret: defaultMode 0400; or give the key in GEOHUB_MASTER_KEY)", path, perm, path)
	}
	return nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// parseMasterKey takes 32 raw bytes (as master.key holds them), or 64 hex
// digits or base64 of 32 bytes, with surrounding space ignored.
func parseMasterKey(b []byte, where string) ([]byte, error) {
	if len(b) == 32 {
		return b, nil
	}
	s := strings.TrimSpace(string(b))
	if k, err := hex.DecodeString(s); err == nil && len(k) == 32 {
		return k, nil
	}
	if k, err := base64.StdEncoding.DecodeString(s); err == nil && len(k) == 32 {
		return k, nil
	}
	return nil, fmt.Errorf("%s: want a 32-byte key (raw, 64 hex digits or base64)", where)
}
