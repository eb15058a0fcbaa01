package folderconfig

import (
	"cmp"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// The two folders a host folder may hold.
const (
	queuesFolder = "taskhoster-queues"
	usersFolder  = "taskhoster-users"
)

// Snapshot is the hosts folder as read at one moment. It never changes after
// Load returns it; a reload builds a new one. It implements ports.Config.
type Snapshot struct {
	hosts  map[string]*domain.Host
	queues []*domain.Queue // every served queue, by host then name
}

var _ ports.Config = (*Snapshot)(nil)

// Host returns the served host whose folder is exactly name.
func (s *Snapshot) Host(name string) (*domain.Host, bool) {
	h, ok := s.hosts[name]
	return h, ok
}

// Queues lists every served queue of every host, sorted by host then name.
// The slice is the caller's own.
func (s *Snapshot) Queues() []*domain.Queue { return slices.Clone(s.queues) }

// Hosts lists the names of the served hosts, sorted.
func (s *Snapshot) Hosts() []string {
	names := make([]string, 0, len(s.hosts))
	for name := range s.hosts {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Check reads dir as Load does and returns only the problems: what
// `taskhoster check --hosts DIR` prints. It fails when HasErrors does.
// After the errors of each invalid queue file comes a warning that a
// running server keeps serving the last valid version of it, if it served
// one (SPEC §12): check runs offline and cannot know whether it did.
func Check(dir string) []Problem {
	_, problems, invalid := load(dir)
	for _, path := range invalid {
		problems = append(problems, Problem{File: path, Reason: keptNote, Warning: true})
	}
	// Stable, so each note stays after its file's errors.
	slices.SortStableFunc(problems, func(a, b Problem) int { return cmp.Compare(a.File, b.File) })
	return problems
}

// keptNote is what Check says of an invalid queue file.
const keptNote = "a running server that served a valid version of this queue file keeps serving that version, " +
	"and reports these errors, until the file is valid again or removed " +
	"(a server started while the file is invalid does not serve the queue)"

// Load reads the hosts folder dir. It always returns a usable Snapshot, made
// of everything that is valid, and every problem found, sorted by file. An
// unreadable dir gives an empty Snapshot and one error.
func Load(dir string) (*Snapshot, []Problem) {
	snap, problems, _ := load(dir)
	return snap, problems
}

// load is Load, and also names the queue files that are there but not
// served for an error (invalid), by queue.
func load(dir string) (*Snapshot, []Problem, map[domain.QueueRef]string) {
	var problems []Problem
	snap := &Snapshot{hosts: map[string]*domain.Host{}}
	invalid := map[domain.QueueRef]string{}

	entries, err := os.ReadDir(dir)
	if err != nil {
		problems = append(problems, Problem{File: dir, Reason: fmt.Sprintf("cannot read the hosts folder: %v", err)})
		return snap, problems, invalid
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if !isDir(path, e) {
			problems = append(problems, ignored(path, "only host folders belong here"))
			continue
		}
		if !domain.ValidHost(e.Name()) {
			problems = append(problems, ignored(path, `a host folder is named as a lower-case DNS name ([a-z0-9.-], no leading dot, no "..")`))
			continue
		}
		host := loadHost(path, e.Name(), &problems, invalid)
		snap.hosts[host.Name] = host
		for _, q := range host.Queues {
			snap.queues = append(snap.queues, q)
		}
	}

	snap.sortQueues()
	// Stable, so the problems of one file stay in the order of the file.
	slices.SortStableFunc(problems, func(a, b Problem) int { return cmp.Compare(a.File, b.File) })
	return snap, problems, invalid
}

func (s *Snapshot) sortQueues() {
	slices.SortFunc(s.queues, func(a, b *domain.Queue) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.Name, b.Name))
	})
}

// loadHost reads one host folder. Users come first: a queue's access lists
// are checked against the names they define. Each queue file left out for
// an error goes into invalid.
func loadHost(path, name string, problems *[]Problem, invalid map[domain.QueueRef]string) *domain.Host {
	host := &domain.Host{Name: name, Queues: map[string]*domain.Queue{}, Users: map[string]domain.User{}}

	entries, err := os.ReadDir(path)
	if err != nil {
		*problems = append(*problems, Problem{File: path, Reason: fmt.Sprintf("cannot read the host folder: %v", err)})
		return host
	}
	for _, e := range entries {
		sub := filepath.Join(path, e.Name())
		if known := e.Name() == queuesFolder || e.Name() == usersFolder; !known || !isDir(sub, e) {
			*problems = append(*problems, ignored(sub, "a host folder holds only the folders "+queuesFolder+" and "+usersFolder))
		}
	}

	users := map[string]bool{}
	tokens := map[string]string{}
	reports := map[string]*fileReport{}
	for _, f := range jsonFiles(filepath.Join(path, usersFolder), "user", problems) {
		r := &fileReport{file: f.path, problems: problems}
		users[f.name] = true
		reports[f.name] = r
		if data, err := os.ReadFile(f.path); err != nil {
			r.fail("", fmt.Sprintf("cannot read: %v", err))
		} else {
			tokens[f.name] = parseUser(f.name, data, r)
		}
	}
	refuseSharedTokens(tokens, reports)
	for name := range users {
		host.Users[name] = domain.User{Name: name, Token: tokens[name]}
	}

	for _, f := range jsonFiles(filepath.Join(path, queuesFolder), "queue", problems) {
		r := &fileReport{file: f.path, problems: problems}
		data, err := os.ReadFile(f.path)
		if err != nil {
			r.fail("", fmt.Sprintf("cannot read: %v", err))
		} else if q := parseQueue(name, f.name, data, users, r); q != nil {
			host.Queues[q.Name] = q
		}
		if r.failed {
			invalid[domain.QueueRef{Host: name, Queue: f.name}] = f.path
		}
	}
	return host
}

// namedFile is a "<name>.json" file with a valid name.
type namedFile struct {
	name, path string
}

// jsonFiles lists the files of dir named "<name>.json" with a valid queue or
// user name, and warns about everything else in it. A dir that does not
// exist is an empty list: a host may have no users, or no queues yet.
func jsonFiles(dir, what string, problems *[]Problem) []namedFile {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !os.IsNotExist(err) {
			*problems = append(*problems, Problem{File: dir, Reason: fmt.Sprintf("cannot read: %v", err)})
		}
		return nil
	}
	var files []namedFile
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		name, isJSON := strings.CutSuffix(e.Name(), ".json")
		switch {
		case !isJSON || !domain.ValidName(name):
			*problems = append(*problems, ignored(path, fmt.Sprintf("a %s file is named NAME.json, NAME matching ^[a-z0-9][a-z0-9_-]{0,62}$", what)))
		case !isRegular(path, e):
			*problems = append(*problems, ignored(path, "not a regular file"))
		default:
			files = append(files, namedFile{name: name, path: path})
		}
	}
	return files
}

func ignored(path, why string) Problem {
	return Problem{File: path, Reason: "ignored: " + why, Warning: true}
}

// isDir and isRegular follow symbolic links, so an operator may link a host
// folder or a queue file in from elsewhere.
func isDir(path string, e fs.DirEntry) bool {
	if e.Type()&fs.ModeSymlink == 0 {
		return e.IsDir()
	}
	info, err := os.Stat(path)
	return err == nil && info.IsDir()
}

func isRegular(path string, e fs.DirEntry) bool {
	if e.Type()&fs.ModeSymlink == 0 {
		return e.Type().IsRegular()
	}
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular()
}
