package durable

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// fileSystems flushes whole filesystems with syncfs(2): the journal's
// checkpoint, which makes every task file, directory entry and log line
// written so far durable at once, so that the records before it are no
// longer needed.
type fileSystems struct {
	files    []*os.File // one directory per distinct filesystem
	trailing int        // see needsTrailingFlush
}

// openFileSystems prepares to flush the filesystems holding dirs (which
// must exist). Dirs on the same filesystem are flushed once.
func openFileSystems(dirs ...string) (*fileSystems, error) {
	seen := map[uint64]bool{}
	fsys := &fileSystems{}
	fail := func(err error) (*fileSystems, error) {
		_ = fsys.close()
		return nil, err
	}
	for _, dir := range dirs {
		f, err := os.Open(dir)
		if err != nil {
			return fail(fmt.Errorf("open %s for syncing: %w", dir, err))
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			_ = f.Close()
			return fail(fmt.Errorf("stat %s: %w", dir, err))
		}
		if seen[st.Dev] {
			_ = f.Close()
			continue
		}
		seen[st.Dev] = true
		fsys.files = append(fsys.files, f)
		if needsTrailingFlush(f, st.Dev) {
			fsys.trailing = 1
		}
	}
	return fsys, nil
}

// flush syncfs's each filesystem once.
func (fsys *fileSystems) flush() error {
	var errs []error
	for _, f := range fsys.files {
		if err := unix.Syncfs(int(f.Fd())); err != nil {
			errs = append(errs, fmt.Errorf("syncfs %s: %w", f.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// flushAll makes every write made before the call durable on its own: it
// flushes once more where one flush is not enough (see needsTrailingFlush).
// It is the journal's checkpoint.
func (fsys *fileSystems) flushAll() error {
	for range 1 + fsys.trailing {
		if err := fsys.flush(); err != nil {
			return err
		}
	}
	return nil
}

// close releases the directories.
func (fsys *fileSystems) close() error {
	var errs []error
	for _, f := range fsys.files {
		errs = append(errs, f.Close())
	}
	fsys.files = nil
	return errors.Join(errs...)
}

// ext2/3/4 share this statfs magic number.
const extMagic = 0xEF53

// needsTrailingFlush reports whether one syncfs is not enough on f's
// filesystem. On ext4 without a journal, syncfs issues the device's cache
// flush before its last write-out of the metadata buffers (inode tables,
// directory blocks), so only the next syncfs's cache flush is known to
// cover a rename: a checkpoint then flushes twice. With a journal, syncfs
// commits it with a cache flush that covers the metadata, and one flush is
// enough; so it is on filesystems whose sync forces their own log (XFS,
// btrfs). A journaled ext filesystem has an entry
// /proc/fs/jbd2/<device>-<journal inode>.
func needsTrailingFlush(f *os.File, dev uint64) bool {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &fs); err != nil || fs.Type != extMagic {
		return err != nil // unknown: be safe
	}
	name := deviceName(dev)
	if name == "" {
		return true
	}
	journals, _ := filepath.Glob("/proc/fs/jbd2/" + name + "-*")
	return len(journals) == 0
}

// deviceName is the kernel's name (vda, loop0) of the block device dev.
func deviceName(dev uint64) string {
	uevent, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/uevent", unix.Major(dev), unix.Minor(dev)))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(uevent), "\n") {
		if name, ok := strings.CutPrefix(line, "DEVNAME="); ok {
			return name
		}
	}
	return ""
}
