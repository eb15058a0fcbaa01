package eventlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Reading backwards: start-up needs the newest lines of the log (what the
// last transitions before a crash were), and those are at the end of the
// newest day file. Reading from the end in blocks costs what is read, not
// the size of the log.
const (
	// backBlock is how much of a day file one read takes.
	backBlock = 64 << 10
	// maxBackLine bounds the bytes held for one line. Lines this Log writes
	// are a few hundred bytes; anything longer is not one of them (a torn
	// write run into by later lines), and is skipped rather than held.
	maxBackLine = 1 << 20
)

// Backwards calls fn with each whole line of the event log, newest first:
// the newest day file from its end to its start, then the day before, and
// so on. It stops when fn returns false, when the oldest day file is done,
// or when ctx ends (returning ctx's error). The line passed to fn has no
// newline and is valid only during the call; fn must copy what it keeps.
//
// A day file's last line without a newline is still being written, or was
// torn by a crash; it is not a line yet and is skipped. Lines are given as
// stored, whether they parse or not: the caller decides what it can read.
// Memory is bounded by one block and one line, whatever the log's size.
func (r *Reader) Backwards(ctx context.Context, fn func(line []byte) bool) error {
	days, err := r.Days()
	if err != nil {
		return err
	}
	for i := len(days) - 1; i >= 0; i-- {
		more, err := r.dayBackwards(ctx, days[i].Day, fn)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// dayBackwards gives the lines of one day file to fn, newest first, and
// reports whether fn wants more.
func (r *Reader) dayBackwards(ctx context.Context, day string, fn func(line []byte) bool) (bool, error) {
	f, err := os.Open(filepath.Join(r.root, "tasks", day+".jsonl"))
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil // pruned since it was listed: nothing to read
	}
	if err != nil {
		return false, fmt.Errorf("read day file %s backwards: %w", day, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("read day file %s backwards: %w", day, err)
	}

	// The file is read from its size now: a line appended meanwhile is
	// newer than everything here, and the caller asked for what was there.
	var (
		block   = make([]byte, backBlock)
		pending []byte // the start of a line whose end is already read: its tail, in file order
		started bool   // a newline has been seen, so pending is a whole line's tail
		skip    bool   // the current line is over maxBackLine: drop it
	)
	for end := fi.Size(); end > 0; {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		start := max(end-backBlock, 0)
		buf := block[:end-start]
		if _, err := f.ReadAt(buf, start); err != nil && !errors.Is(err, io.EOF) {
			return false, fmt.Errorf("read day file %s backwards: %w", day, err)
		}
		end = start
		for len(buf) > 0 {
			i := bytes.LastIndexByte(buf, '\n')
			if i < 0 {
				// No line starts in what is left of this block: the rest
				// belongs to the line that began earlier in the file.
				pending, skip = prepend(buf, pending, skip)
				break
			}
			tail := buf[i+1:]
			buf = buf[:i]
			if !started {
				// Bytes after the file's last newline: an unfinished line.
				started, pending, skip = true, nil, false
				continue
			}
			line, drop := tail, skip
			if len(pending) > 0 {
				line, drop = prepend(tail, pending, skip)
			}
			pending, skip = nil, false
			if !drop && !fn(line) {
				return false, nil
			}
		}
	}
	// What is left runs from the file's start to its first newline.
	if started && !skip && !fn(pending) {
		return false, nil
	}
	return true, nil
}

// prepend puts head before the part of a line already read, unless the line
// would grow past maxBackLine, in which case it is dropped (and skip says so
// until the line's start is reached).
func prepend(head, tail []byte, skip bool) ([]byte, bool) {
	if skip || len(head)+len(tail) > maxBackLine {
		return nil, true
	}
	line := make([]byte, 0, len(head)+len(tail))
	return append(append(line, head...), tail...), false
}
