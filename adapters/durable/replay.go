package durable

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// lap is what one journal file holds: its lap record's fields and, once
// read (parse), the records after it, in order.
type lap struct {
	file    int // the journal file it is in
	lap     uint64
	boot    string   // the boot it was written in
	roots   []string // the folders its records' Root indexes
	records []record
}

// replay makes the files agree with every record of the laps the journal
// holds, older lap first, each in the order written, and reports how many
// records it applied and how many files it had to change. A lap ends at its
// first record that is cut short, fails its checksum or belongs to another
// lap: what followed was never acknowledged.
//
// Only a journal written before the machine last booted is replayed: then
// a power loss (or a crash of the kernel) may have kept a record's bytes
// and lost the file's, which replay writes again. A journal of this boot was
// left by a process that died with the page cache intact, so the files hold
// what every record says, and may hold newer changes that were never
// committed (a claim, a re-queue): replaying older records over them would
// undo those and disagree with the event log. Such a journal is left alone,
// unless it stopped after a failed flush (stoppedName): then the page cache
// may have lost what the disc never got, as after a power loss.
func (j *journal) replay() (records, changed int, err error) {
	trustCache := !j.wasStopped()
	for _, l := range j.laps() {
		if trustCache && l.boot != "" && l.boot == j.boot {
			continue
		}
		recs, err := j.records(l)
		if err != nil {
			return records, changed, err
		}
		for _, r := range recs {
			// A record belongs in the folder it was written for. After a
			// crash, starting with other folders would put its bytes in
			// the wrong files: refuse, and say how to replay it.
			if r.Root >= len(l.roots) || r.Root >= len(j.roots) || !j.sameRoot(l.roots[r.Root], r.Root) {
				root := "?"
				if r.Root < len(l.roots) {
					root = l.roots[r.Root]
				}
				return records, changed, fmt.Errorf("the journal in %s holds writes to %q, not yet replayed; start the server once with the folders it had then (--items, --logs), so that it can replay them",
					j.dir, root)
			}
			done, err := j.apply(r)
			if err != nil {
				return records, changed, fmt.Errorf("replay journal lap %d: %w", l.lap, err)
			}
			records++
			if done {
				changed++
			}
		}
	}
	return records, changed, nil
}

// sameRoot reports whether a lap's folder lapRoot is the folder of root
// index i: its absolute path, or, for a lap of a version that wrote the
// folders as configured, the same relative path (from which working
// directory, such a lap does not say).
func (j *journal) sameRoot(lapRoot string, i int) bool {
	return lapRoot == j.roots[i] || (!filepath.IsAbs(lapRoot) && lapRoot == j.given[i])
}

// apply makes the disc agree with one record (whose root replay checked),
// reporting whether it had to change anything. A record whose path would
// leave its root, or name the root itself (whose temp file would go beside
// it, outside), is refused before anything is written.
func (j *journal) apply(r record) (bool, error) {
	if !filepath.IsLocal(r.Path) || filepath.Clean(r.Path) == "." {
		return false, fmt.Errorf("record for %q in root %d: not a path the journal covers", r.Path, r.Root)
	}
	path := filepath.Join(j.roots[r.Root], r.Path)
	switch r.Op {
	case opPut:
		if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, r.Data) {
			return false, nil
		}
		return true, replaceFile(path, r.Data)
	case opRemove:
		err := os.Remove(path)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("restore removal of %s: %w", path, err)
		}
		return true, nil
	case opAppend:
		return appendAt(path, r.Off, r.Data)
	}
	return false, fmt.Errorf("record %d for %s: unknown operation", r.Op, r.Path)
}

// replaceFile writes data to a temp file beside path and renames it there.
// The temp file's name is one the stores' start-up scans remove.
func replaceFile(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("restore %s: %w", path, err)
	}
	tmp := filepath.Join(dir, "."+filepath.Base(path)+".tmp-replay"+strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("restore %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("restore %s: %w", path, err)
	}
	return nil
}

// appendAt makes the file at path hold data from byte off.
func appendAt(path string, off int64, data []byte) (bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
			f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		}
	}
	if err != nil {
		return false, fmt.Errorf("restore %s: %w", path, err)
	}
	defer f.Close()
	cur := make([]byte, len(data))
	if n, _ := f.ReadAt(cur, off); n == len(data) && bytes.Equal(cur, data) {
		return false, nil
	}
	if _, err := f.WriteAt(data, off); err != nil {
		return false, fmt.Errorf("restore %s: %w", path, err)
	}
	return true, nil
}

// laps reads the lap record at the start of each file (not the records
// after it: see records). Only laps that together form the history since
// the older began are returned, oldest first: the newest, and the one just
// before it.
func (j *journal) laps() []lap {
	var laps []lap
	for i, f := range j.files {
		if l, ok := head(f); ok {
			l.file = i
			laps = append(laps, l)
		}
	}
	slices.SortFunc(laps, func(a, b lap) int { return cmp.Compare(a.lap, b.lap) })
	if len(laps) == 2 && laps[0].lap+1 != laps[1].lap {
		laps = laps[1:] // the older was checkpointed before the newer began
	}
	return laps
}

// head reads the lap record at the start of f.
func head(f *os.File) (lap, bool) {
	hdr := make([]byte, headerSize)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		return lap{}, false
	}
	size := int64(binary.LittleEndian.Uint32(hdr[12:16]))
	if size > maxLapData {
		return lap{}, false
	}
	rec := make([]byte, headerSize+size)
	if _, err := f.ReadAt(rec, 0); err != nil {
		return lap{}, false
	}
	l, ok := parse(rec)
	return l, ok
}

// records reads the records of lap l from its file.
func (j *journal) records(l lap) ([]record, error) {
	data, err := io.ReadAll(io.NewSectionReader(j.files[l.file], 0, 1<<62))
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	again, ok := parse(data)
	if !ok || again.lap != l.lap {
		return nil, fmt.Errorf("read journal: lap %d changed while read", l.lap)
	}
	return again.records, nil
}

// parse reads one file's lap: a lap record, then its records up to the
// first that does not belong.
func parse(data []byte) (lap, bool) {
	first, data, ok := next(data)
	if !ok || first.Op != opLap {
		return lap{}, false
	}
	fields := strings.Split(string(first.Data), "\x00")
	l := lap{lap: first.lap, boot: fields[0], roots: fields[1:]}
	for {
		r, rest, ok := next(data)
		if !ok || r.lap != l.lap || r.Op == opLap {
			return l, true
		}
		l.records = append(l.records, r.record)
		data = rest
	}
}

type stamped struct {
	record
	lap uint64
}

// next decodes the record at the start of data.
func next(data []byte) (stamped, []byte, bool) {
	if len(data) < headerSize || !bytes.Equal(data[:4], []byte(magic)) {
		return stamped{}, nil, false
	}
	size := int(binary.LittleEndian.Uint32(data[12:16]))
	if size < fixedSize || len(data)-headerSize < size {
		return stamped{}, nil, false
	}
	payload := data[headerSize : headerSize+size]
	if checksum(data[4:12], payload) != binary.LittleEndian.Uint32(data[16:20]) {
		return stamped{}, nil, false
	}
	pathLen := int(binary.LittleEndian.Uint16(payload[10:12]))
	if fixedSize+pathLen > size {
		return stamped{}, nil, false
	}
	r := stamped{lap: binary.LittleEndian.Uint64(data[4:12])}
	r.Op = op(payload[0])
	r.Root = int(payload[1])
	r.Off = int64(binary.LittleEndian.Uint64(payload[2:10]))
	r.Path = string(payload[fixedSize : fixedSize+pathLen])
	r.Data = payload[fixedSize+pathLen:]
	return r, data[headerSize+size:], true
}
