package eventlog

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Prune deletes the day files that fell out of a window of days days ending
// today, the UTC day of now: with days = 21 it keeps today and the 20 days
// before it, and deletes every earlier day. A file of a later day (a clock
// set back) is kept. Entries whose name is not exactly YYYY-MM-DD.jsonl, and
// anything that is not a regular file, are left alone: the folder may hold
// things this Log did not write.
//
// The payload archive ages out on the same window: a task's archive folder
// goes once its last write was on a day before the window, as if it were the
// day file of its last archived event (see pruneArchives), and host and queue
// folders left empty go with it.
//
// Prune is meant to be called often (the sweep calls it once a minute), and
// the day files cost one listing of tasks/. The archive holds a folder per
// task, so it is walked only when the window has moved on to a new day since
// the last complete walk (and at the first call): between two such days no
// folder written by this Log can age out. Folders that look older than they
// are (restored from a backup) wait for the next day. A cancelled ctx stops
// the walk between two folders; the next call walks again.
func (l *Log) Prune(ctx context.Context, now time.Time, days int) error {
	if days < 1 {
		return fmt.Errorf("prune event log: days must be at least 1, got %d", days)
	}
	y, m, d := now.UTC().Date()
	oldestKept := time.Date(y, m, d-(days-1), 0, 0, 0, 0, time.UTC).Format(dayLayout)

	l.pruneMu.Lock()
	defer l.pruneMu.Unlock()
	dayErr := l.pruneDays(oldestKept)
	if l.archivesKeptFrom == oldestKept {
		return dayErr
	}
	if err := l.pruneArchives(ctx, oldestKept); err != nil {
		return errors.Join(dayErr, fmt.Errorf("prune payload archive: %w", err))
	}
	l.archivesKeptFrom = oldestKept
	return dayErr
}

// pruneDays deletes the day files of days before oldestKept.
func (l *Log) pruneDays(oldestKept string) error {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("prune event log: %w", err)
	}
	var errs []error
	for _, e := range entries {
		day, ok := dayOfName(e.Name())
		// Day names sort as text in date order.
		if !ok || !e.Type().IsRegular() || day >= oldestKept {
			continue
		}
		if err := l.remove(day); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("prune event log: %w", err)
	}
	return nil
}

// remove deletes day's file, closing it first if it is open, so that a later
// line of that day starts a new file rather than writing to an unlinked one.
func (l *Log) remove(day string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	if f, ok := l.files[day]; ok {
		delete(l.files, day)
		errs = append(errs, f.Close())
	}
	if err := os.Remove(filepath.Join(l.dir, day+".jsonl")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// dayOfName returns the day a day file's name stands for, and whether the
// name is one: a real date in the exact form the Log writes.
func dayOfName(name string) (string, bool) {
	day, ok := strings.CutSuffix(name, ".jsonl")
	if !ok {
		return "", false
	}
	t, err := time.Parse(dayLayout, day)
	if err != nil || t.Format(dayLayout) != day {
		return "", false
	}
	return day, true
}
