package eventlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/taskhoster/taskhoster/domain"
)

// Reader reads the event log's day files and the payload archive for the
// log API (SPEC §8). It only ever opens files for reading, so reading the
// log never changes a task, a line or a body. It needs no Log: it can read
// a logs folder that another process writes.
type Reader struct {
	root    string                      // <logs>
	durable func(context.Context) error // see Durable; nil: none
	log     *Log                        // the writer Durable waits for; nil: none
}

// NewReader reads the logs folder dir (the serve --logs folder).
func NewReader(dir string) *Reader { return &Reader{root: dir} }

// Durable has ReadLines serve only lines that are durable, for the server
// that writes them with l: once it knows how far a day file reaches, it
// waits for l to have recorded what it wrote there, calls sync (the
// server's ports.Syncer) and reads no further. A line is written before
// the commit that makes it durable, and a client that mirrors the log
// (SPEC §8) must not keep a line that a power loss then takes away: the
// line written in its place would be skipped, or read twice.
func (r *Reader) Durable(l *Log, sync func(context.Context) error) *Reader {
	r.durable, r.log = sync, l
	return r
}

// DayFile is one day file of the event log: its day and its size in bytes,
// which is how far a client can ask to read it.
type DayFile struct {
	Day  string
	Size int64
}

// Days lists the day files, oldest first. A logs folder without a tasks
// folder yet has no days.
func (r *Reader) Days() ([]DayFile, error) {
	entries, err := os.ReadDir(filepath.Join(r.root, "tasks"))
	if errors.Is(err, fs.ErrNotExist) {
		return []DayFile{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list day files: %w", err)
	}
	days := []DayFile{}
	// ReadDir sorts by name, and day names sort in date order.
	for _, e := range entries {
		day, ok := dayOfName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // pruned since the listing
		}
		if err != nil {
			return nil, fmt.Errorf("list day files: %w", err)
		}
		days = append(days, DayFile{Day: day, Size: fi.Size()})
	}
	return days, nil
}

// ReadLines reads the whole lines of day's file from byte offset on, at most
// limit bytes of them, and returns those that keep accepts (by the host and
// queue the line names), each exactly as stored with its newline, and the
// offset just past the last whole line read, kept or not: where the next
// read starts. A line still being written (no newline yet) is left for the
// next read. A line that is not an event line (a fragment of a torn write
// that a later line ran into after a crash) is skipped.
//
// Errors: KindNotFound "not_found" for a day that is not YYYY-MM-DD or has
// no file (never written, or pruned); KindInvalid "invalid_offset" for an
// offset that is negative, past the end, or not at the start of a line.
func (r *Reader) ReadLines(day string, offset int64, limit int, keep func(host, queue string) bool) ([]byte, int64, error) {
	if limit < 1 {
		return nil, 0, fmt.Errorf("read day file %s: limit %d is not positive", day, limit)
	}
	f, err := r.openDay(day)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("read day file %s: %w", day, err)
	}
	if err := checkOffset(f, offset, fi.Size()); err != nil {
		return nil, 0, err
	}
	if r.durable != nil && fi.Size() > offset {
		if r.log != nil {
			r.log.recorded()
		}
		if err := r.durable(context.Background()); err != nil {
			return nil, 0, fmt.Errorf("read day file %s: %w", day, err)
		}
	}

	// The file may grow while it is read; whatever is past its size now is
	// read next time, so the two reads agree on where lines start.
	buf := make([]byte, min(int64(limit), fi.Size()-offset))
	n, err := f.ReadAt(buf, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, fmt.Errorf("read day file %s: %w", day, err)
	}
	buf = buf[:n]
	whole := bytes.LastIndexByte(buf, '\n') + 1
	if whole == 0 && n == limit {
		// Lines are a few hundred bytes; one that fills the whole limit is
		// not a line this Log wrote, and reading it in pieces cannot help.
		return nil, 0, fmt.Errorf("read day file %s: no line ends within %d bytes of offset %d", day, limit, offset)
	}

	var out []byte
	for rest := buf[:whole]; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		line := rest[:i+1]
		rest = rest[i+1:]
		var at struct{ Host, Queue string }
		if json.Unmarshal(line, &at) != nil {
			continue
		}
		if keep(at.Host, at.Queue) {
			out = append(out, line...)
		}
	}
	return out, offset + int64(whole), nil
}

func (r *Reader) openDay(day string) (*os.File, error) {
	if _, ok := dayOfName(day + ".jsonl"); !ok {
		return nil, noSuchDay(day, nil)
	}
	f, err := os.Open(filepath.Join(r.root, "tasks", day+".jsonl"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, noSuchDay(day, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open day file %s: %w", day, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, noSuchDay(day, err)
	}
	return f, nil
}

// checkOffset accepts 0..size where the byte before offset ends a line.
func checkOffset(f *os.File, offset, size int64) error {
	if offset < 0 || offset > size {
		return invalidOffset(offset, "outside the file of %d bytes", size)
	}
	if offset == 0 {
		return nil
	}
	var before [1]byte
	if _, err := f.ReadAt(before[:], offset-1); err != nil {
		return fmt.Errorf("check offset %d: %w", offset, err)
	}
	if before[0] != '\n' {
		return invalidOffset(offset, "not at the start of a line")
	}
	return nil
}

// Payload is an archived body opened for reading: a ReadSeeker over its
// whole content and the time it last changed.
type Payload struct {
	*io.SectionReader
	ModTime time.Time
	f       *os.File
}

// NewPayload is a Payload over size bytes of r, last changed at modTime:
// for a body kept elsewhere than in a file (adapters/postgres).
func NewPayload(r io.ReaderAt, size int64, modTime time.Time) *Payload {
	return &Payload{SectionReader: io.NewSectionReader(r, 0, size), ModTime: modTime}
}

// Close releases the file, if any.
func (p *Payload) Close() error {
	if p.f == nil {
		return nil
	}
	return p.f.Close()
}

// OpenPayload opens one archived body of a task: name is one of ItemFile,
// ProgressFile, ResultFile, ErrorFile. Of progress.jsonl it gives the whole
// lines only, so a progress being appended right now is not served in part.
//
// Errors: KindNotFound "not_found" for an unknown file name, a name that is
// no valid host, queue or id, or a body that was never archived (or pruned).
func (r *Reader) OpenPayload(host, queue, id, name string) (*Payload, error) {
	switch name {
	case ItemFile, ProgressFile, ResultFile, ErrorFile:
	default:
		return nil, noSuchPayload(nil)
	}
	dir, err := archiveFolder(r.root, host, queue, id)
	if err != nil {
		return nil, noSuchPayload(err)
	}
	f, err := os.Open(filepath.Join(dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, noSuchPayload(err)
	}
	if err != nil {
		return nil, fmt.Errorf("open payload: %w", err)
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, noSuchPayload(err)
	}
	size := fi.Size()
	if name == ProgressFile {
		if size, err = wholeLines(f, size); err != nil {
			f.Close()
			return nil, fmt.Errorf("open payload: %w", err)
		}
	}
	return &Payload{SectionReader: io.NewSectionReader(f, 0, size), ModTime: fi.ModTime(), f: f}, nil
}

// wholeLines is the length of the first size bytes of f up to and including
// their last newline, looking backwards from size a block at a time (a
// progress line is at most a queue's maxItemBytes).
func wholeLines(f *os.File, size int64) (int64, error) {
	const block = 64 << 10
	buf := make([]byte, block)
	for end := size; end > 0; {
		start := max(end-block, 0)
		n, err := f.ReadAt(buf[:end-start], start)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return start + int64(i) + 1, nil
		}
		end = start
	}
	return 0, nil
}

func noSuchDay(day string, err error) error {
	return &domain.Error{Kind: domain.KindNotFound, Code: domain.CodeNotFound,
		Message: fmt.Sprintf("no day file %q in the event log", day), Err: err}
}

func noSuchPayload(err error) error {
	return &domain.Error{Kind: domain.KindNotFound, Code: domain.CodeNotFound, Message: "no such archived payload", Err: err}
}

func invalidOffset(offset int64, format string, args ...any) error {
	return &domain.Error{Kind: domain.KindInvalid, Code: domain.CodeInvalidOffset,
		Message: fmt.Sprintf("offset %d: ", offset) + fmt.Sprintf(format, args...)}
}
