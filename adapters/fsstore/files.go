package fsstore

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/taskhoster/taskhoster/domain"
)

// dirMode is for the state directories. Task records may carry private
// payloads: the files themselves are created 0600 (os.CreateTemp).
const dirMode = 0o750

// tempMarker is in the name of every temp file a write leaves behind when it
// is interrupted; the start-up scan removes such files.
const tempMarker = ".json.tmp-"

func fileName(id string) string { return id + ".json" }

func isTempName(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, tempMarker)
}

// statePath is where a task with status st lives.
func (q *queue) statePath(st domain.Status, id string) string {
	return filepath.Join(q.path, st.Dir(), fileName(id))
}

// ensureDirs creates the queue's state directories the first time it is
// written to. q.mu is held.
func (q *queue) ensureDirs() error {
	if q.dirsReady {
		return nil
	}
	for _, d := range domain.Dirs {
		if err := os.MkdirAll(filepath.Join(q.path, d), dirMode); err != nil {
			return unavailable("create state directory", err)
		}
	}
	q.dirsReady = true
	return nil
}

// write stores t as the file its status names: a temp file in the same
// directory, then a rename over the destination, so a reader (or a restart)
// sees the old record or the new one and never half of one. It does not
// fsync; Syncer does, for many writes at once. q.mu is held.
func (q *queue) write(t domain.Task, data []byte) error {
	if err := q.ensureDirs(); err != nil {
		return err
	}
	dst := q.statePath(t.Status, t.ID)
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+fileName(t.ID)+".tmp-*")
	if err != nil {
		return unavailable("create temp file", err)
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		_ = os.Remove(tmp.Name()) // best effort: the start-up scan removes it otherwise
		return unavailable("write task "+t.ID, err)
	}
	return nil
}

// unlink removes a task's file. A file already gone is not an error: the
// index, which only this process changes, is what says a task exists.
func unlink(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return unavailable("remove task file", err)
	}
	return nil
}

// unavailable classifies a failed filesystem call: the disc is full, read
// only, or refuses us, and the caller may try again later.
func unavailable(op string, err error) error {
	return &domain.Error{
		Kind:    domain.KindUnavailable,
		Code:    "storage_unavailable",
		Message: op,
		Err:     err,
	}
}
