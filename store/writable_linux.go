package store

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"geohub/app"
)

// minFreeBytes is where the filesystem counts as full: less than this and
// the next checkpoint or a new WAL page may not fit.
const minFreeBytes = 1 << 20

// filesWritable checks, without writing, that this process could write the
// database: the directory (for the WAL and its index) and the file are
// writable, the filesystem is not mounted read-only, and it has room. The
// messages reach an unauthenticated /readyz, so the paths go only into the
// wrapped error, which the server logs.
func filesWritable(path string) error {
	dir := filepath.Dir(path)
	unavailable := func(msg string, err error) error {
		return &app.Error{Code: app.EUnavailable, Message: msg, Err: err}
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return unavailable("sem permissão de escrita no diretório de dados", fmt.Errorf("%s: %w", dir, err))
	}
	if err := unix.Access(path, unix.W_OK); err != nil {
		return unavailable("sem permissão de escrita no arquivo do banco de dados", fmt.Errorf("%s: %w", path, err))
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return unavailable("não foi possível ler o espaço livre do disco", fmt.Errorf("statfs %s: %w", dir, err))
	}
	if st.Flags&unix.ST_RDONLY != 0 {
		return unavailable("o disco de dados está montado somente para leitura", fmt.Errorf("%s is on a read-only mount", dir))
	}
	if free := st.Bavail * uint64(st.Bsize); free < minFreeBytes {
		return unavailable(fmt.Sprintf("sem espaço em disco (%d bytes livres)", free),
			fmt.Errorf("%s: %d bytes available", dir, free))
	}
	return nil
}
