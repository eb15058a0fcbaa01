package faults

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// storedTask is what the checker needs of one task file.
type storedTask struct {
	ID         string
	Queue      string
	Dir        string // the state directory it is in
	Status     string
	Error      string // "" when there is none
	ItemTag    string
	ResultTag  string // "" when there is no result
	FailureTag string // the tag of the last give-back's or failure's reason
	Attempts   int
	Fetched    bool   // fetchedAt is set
	NotBefore  *int64 // when set (SPEC §11)
	Priority   int
	Key        string // its idempotencyKey ("": none)
}

// store is the items folders of the run's queues as the server left them.
type store struct {
	tasks  map[string]storedTask
	debris []string // what a clean start-up should have removed or never made
}

// readStore reads every task file of the run's queues. After a clean start-up a
// task is in exactly one state directory, and no temp file is left; a file
// in corrupt/ means a write was torn, which atomic renames must prevent.
func readStore(items string) (store, error) {
	s := store{tasks: map[string]storedTask{}}
	for name := range runQueues {
		root := filepath.Join(items, host, name)
		entries, err := os.ReadDir(root)
		if err != nil {
			return s, fmt.Errorf("read queue folder: %w", err)
		}
		for _, e := range entries {
			switch e.Name() {
			case "pending", "processing", "done":
			default:
				s.debris = append(s.debris, filepath.Join(root, e.Name()))
				continue
			}
			if err := s.readDir(filepath.Join(root, e.Name()), name, e.Name()); err != nil {
				return s, err
			}
		}
	}
	return s, nil
}

func (s *store) readDir(dir, queue, state string) error {
	files, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read state directory: %w", err)
	}
	for _, f := range files {
		path := filepath.Join(dir, f.Name())
		id, ok := strings.CutSuffix(f.Name(), ".json")
		if !ok || strings.HasPrefix(f.Name(), ".") {
			s.debris = append(s.debris, path)
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		t, ok := parseTask(data, id, queue, state)
		if !ok {
			s.debris = append(s.debris, path+" (unreadable)")
			continue
		}
		if old, twice := s.tasks[id]; twice {
			s.debris = append(s.debris, fmt.Sprintf("task %s in both %s and %s", id, old.Dir, state))
		}
		s.tasks[id] = t
	}
	return nil
}

// parseTask reads what the checker needs of one task record (a task
// file, or a tasks row's record on PostgreSQL: the same JSON), stored in
// state. It reports false when the record is unreadable or not task id's.
func parseTask(data []byte, id, queue, state string) (storedTask, bool) {
	var rec struct {
		ID       string
		Status   string
		Attempts int
		Item     struct{ Tag string }
		// A pointer, to tell a result without a tag from no result.
		Result    *struct{ Tag string }
		Failure   *struct{ Tag string }
		Error     *string
		FetchedAt *int64
		NotBefore *int64
		Priority  int
		Key       string `json:"idempotencyKey"`
	}
	if err := json.Unmarshal(data, &rec); err != nil || rec.ID != id {
		return storedTask{}, false
	}
	t := storedTask{ID: id, Queue: queue, Dir: state, Status: rec.Status, ItemTag: rec.Item.Tag, Attempts: rec.Attempts,
		Fetched: rec.FetchedAt != nil, NotBefore: rec.NotBefore, Priority: rec.Priority, Key: rec.Key}
	if rec.Result != nil {
		t.ResultTag = rec.Result.Tag
	}
	if rec.Failure != nil {
		t.FailureTag = rec.Failure.Tag
	}
	if rec.Error != nil {
		t.Error = *rec.Error
	}
	return t, true
}

// event is what the checker needs of one event log line.
type event struct {
	ID       string
	Queue    string
	Event    string
	Status   string
	Error    string // a failed line's error code
	Attempts int
	Worker   string // "" for null
	At       int64  // Unix milliseconds, from "at"
}

// readLog reads every day file, oldest first, in file order. A line that
// does not parse is counted as torn (a crash cut a write short, or the next
// line ran into such a fragment) rather than stopping the check.
func readLog(logs string) (events []event, torn int, err error) {
	files, err := filepath.Glob(filepath.Join(logs, "tasks", "*.jsonl"))
	if err != nil {
		return nil, 0, err
	}
	for _, name := range files { // Glob sorts: YYYY-MM-DD names sort by day
		f, err := os.Open(name)
		if err != nil {
			return nil, 0, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			ev, ok, ours := parseLine(sc.Bytes())
			if !ok {
				torn++
				continue
			}
			if ours {
				events = append(events, ev)
			}
		}
		if err := errors.Join(sc.Err(), f.Close()); err != nil {
			return nil, 0, fmt.Errorf("read %s: %w", name, err)
		}
	}
	return events, torn, nil
}

// parseLine reads one event line: ok is false for one that does not parse
// (torn), ours whether it is of one of the run's queues.
func parseLine(b []byte) (ev event, ok, ours bool) {
	var line struct {
		ID, Event, Status, Queue, At string
		Error                        *string
		Attempts                     int
		Worker                       *string
	}
	if json.Unmarshal(b, &line) != nil || line.ID == "" {
		return event{}, false, false
	}
	at, err := time.Parse(time.RFC3339Nano, line.At)
	if err != nil {
		return event{}, false, false
	}
	if _, ours = runQueues[line.Queue]; !ours {
		return event{}, true, false
	}
	ev = event{ID: line.ID, Queue: line.Queue, Event: line.Event, Status: line.Status, Attempts: line.Attempts, At: at.UnixMilli()}
	if line.Error != nil {
		ev.Error = *line.Error
	}
	if line.Worker != nil {
		ev.Worker = *line.Worker
	}
	return ev, true, true
}
