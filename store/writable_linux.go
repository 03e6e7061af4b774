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
// database: the filesystem is not mounted read-only and has room, and the
// directory (for the WAL and its index) and the file are writable by the
// effective user. The messages reach an unauthenticated /readyz, so paths
// and sizes go only into the wrapped error, which the server logs.
func filesWritable(path string) error {
	dir := filepath.Dir(path)
	unavailable := func(msg string, err error) error {
		return &app.Error{Code: app.EUnavailable, Message: msg, Err: err}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return unavailable("não foi possível ler o espaço livre do disco de dados", fmt.Errorf("statfs %s: %w", dir, err))
	}
	// Checked before access(2), which says EROFS for a read-only mount.
	if st.Flags&unix.ST_RDONLY != 0 {
		return unavailable("o disco de dados está montado somente para leitura", fmt.Errorf("%s is on a read-only mount", dir))
	}
	// Bavail counts fragments: f_frsize, which some filesystems (ZFS)
	// report far smaller than f_bsize.
	unit := uint64(st.Frsize)
	if unit == 0 {
		unit = uint64(st.Bsize)
	}
	if free := st.Bavail * unit; free < minFreeBytes {
		return unavailable("sem espaço no disco de dados", fmt.Errorf("%s: %d bytes available", dir, free))
	}
	for _, p := range []struct{ path, msg string }{
		{dir, "sem permissão de escrita no diretório de dados"},
		{path, "sem permissão de escrita no arquivo do banco de dados"},
	} {
		if err := unix.Faccessat(unix.AT_FDCWD, p.path, unix.W_OK, unix.AT_EACCESS); err != nil {
			return unavailable(p.msg, fmt.Errorf("%s: %w", p.path, err))
		}
	}
	return nil
}
