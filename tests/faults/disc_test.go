package faults

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// storedTask is what the checker needs of one task file.
type storedTask struct {
	ID        string
	Dir       string // the state directory it is in
	Status    string
	ItemTag   string
	ResultTag string // "" when there is no result
	Attempts  int
	Fetched   bool // fetchedAt is set
}

// store is the items folder of the queue as the server left it.
type store struct {
	tasks  map[string]storedTask
	debris []string // what a clean start-up should have removed or never made
}

// readStore reads every task file of the queue. After a clean start-up a
// task is in exactly one state directory, and no temp file is left; a file
// in corrupt/ means a write was torn, which atomic renames must prevent.
func readStore(items string) (store, error) {
	s := store{tasks: map[string]storedTask{}}
	root := filepath.Join(items, host, queue)
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
		if err := s.readDir(filepath.Join(root, e.Name()), e.Name()); err != nil {
			return s, err
		}
	}
	return s, nil
}

func (s *store) readDir(dir, state string) error {
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
		var rec struct {
			ID       string
			Status   string
			Attempts int
			Item     struct{ Tag string }
			// A pointer, to tell a result without a tag from no result.
			Result    *struct{ Tag string }
			FetchedAt *int64
		}
		if err := json.Unmarshal(data, &rec); err != nil || rec.ID != id {
			s.debris = append(s.debris, path+" (unreadable)")
			continue
		}
		if old, twice := s.tasks[id]; twice {
			s.debris = append(s.debris, fmt.Sprintf("task %s in both %s and %s", id, old.Dir, state))
		}
		t := storedTask{ID: id, Dir: state, Status: rec.Status, ItemTag: rec.Item.Tag, Attempts: rec.Attempts, Fetched: rec.FetchedAt != nil}
		if rec.Result != nil {
			t.ResultTag = rec.Result.Tag
		}
		s.tasks[id] = t
	}
	return nil
}

// event is what the checker needs of one event log line.
type event struct {
	ID       string
	Event    string
	Status   string
	Attempts int
	Worker   string // "" for null
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
			var line struct {
				ID, Event, Status, Queue string
				Attempts                 int
				Worker                   *string
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil || line.ID == "" {
				torn++
				continue
			}
			if line.Queue != queue {
				continue
			}
			ev := event{ID: line.ID, Event: line.Event, Status: line.Status, Attempts: line.Attempts}
			if line.Worker != nil {
				ev.Worker = *line.Worker
			}
			events = append(events, ev)
		}
		err = errors.Join(sc.Err(), f.Close())
		if err != nil {
			return nil, 0, fmt.Errorf("read %s: %w", name, err)
		}
	}
	return events, torn, nil
}
