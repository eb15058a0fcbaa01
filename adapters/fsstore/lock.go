package fsstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrLocked is wrapped by Open's error when another process holds the items
// folder. Two servers on one folder would each trust their own index and
// hand out the same task twice.
var ErrLocked = errors.New("items folder is in use by another taskhoster process")

// lockedError names the folder and the process holding it.
type lockedError struct {
	dir, pid string
}

func (e *lockedError) Error() string {
	return fmt.Sprintf("items folder %s is in use by another taskhoster process (pid %s)", e.dir, e.pid)
}

func (e *lockedError) Is(target error) bool { return target == ErrLocked }

// lockFolder takes an exclusive flock on <dir>/.lock and writes our pid into
// it. The kernel drops the lock when the process dies, so a crash never
// leaves the folder locked.
func lockFolder(dir string) (*os.File, error) {
	path := filepath.Join(dir, ".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		pid := "unknown"
		if b, rerr := os.ReadFile(path); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
			pid = strings.TrimSpace(string(b))
		}
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &lockedError{dir: dir, pid: pid}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := writePID(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("write pid to %s: %w", path, err)
	}
	return f, nil
}

func writePID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}
