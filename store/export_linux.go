package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// shmDMS is the byte of the -shm file on which every process that has a
// WAL database open holds a read lock for as long as it has it open
// (SQLite's os_unix.c, UNIX_SHM_DMS: 120 + SQLITE_SHM_NLOCK), the very
// lock SQLite itself tests to learn whether it is alone.
const shmDMS = 128

// otherProcess returns the pid of a process other than this one that has
// the database at path open, or 0. F_GETLK reports a lock that would
// conflict with a write lock, and never this process's own.
func otherProcess(path string) (int, error) {
	f, err := os.Open(path + "-shm")
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil // no process has had it open since the last clean close
	}
	if err != nil {
		return 0, fmt.Errorf("check whether %s is in use: %w", path, err)
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: shmDMS, Len: 1}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err != nil {
		return 0, fmt.Errorf("check whether %s is in use: %w", path, err)
	}
	if lk.Type == unix.F_UNLCK {
		return 0, nil
	}
	return int(lk.Pid), nil
}
