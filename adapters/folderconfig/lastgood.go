package folderconfig

import (
	"strings"

	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/domain"
)

// Keeping the last good queue file (SPEC §12).
//
// A served queue whose file turns invalid (a typo while editing it) does
// not disappear with its tasks: the reload keeps the version in force
// before, with domain.Queue.Problems saying what is wrong with the file
// now, and logs that once. Only a reload of a server that served the queue
// can do that: a queue file invalid when the server starts, or when it
// first appears, is not served, as before; a removed file (or host folder)
// still removes the queue. A version kept stays kept through further
// reloads, however the file stays wrong, until it is valid again (Problems
// cleared) or gone.

// kept is a queue served from its last valid version: the file and the
// problems it has now.
type kept struct {
	file     string
	problems []string
}

// keepLastGood puts into snap, just loaded and not in force yet, the queues
// of prev (the snapshot in force, nil at the first load) whose files are
// now invalid (by queue, as load names them), each a copy with its
// Problems, and says which it kept.
func keepLastGood(prev, snap *Snapshot, problems []Problem, invalid map[domain.QueueRef]string) map[domain.QueueRef]kept {
	out := map[domain.QueueRef]kept{}
	if prev == nil || len(invalid) == 0 {
		return out
	}
	for _, old := range prev.queues {
		file, ok := invalid[old.Ref()]
		host := snap.hosts[old.Host]
		if !ok || host == nil {
			continue
		}
		var reasons []string
		for _, p := range problems {
			if p.File == file && !p.Warning {
				reasons = append(reasons, p.String())
			}
		}
		q := *old // prev may still be read: copy, never change it
		q.Problems = reasons
		host.Queues[q.Name] = &q
		snap.queues = append(snap.queues, &q)
		out[old.Ref()] = kept{file: file, problems: reasons}
	}
	snap.sortQueues()
	return out
}

// logKept logs each queue kept at its last good version once, with the
// file and its first problem's JSON path and reason (and every problem),
// and again only when its problems change; and a queue whose file is valid
// again, once. It returns what to compare with at the next reload.
func logKept(log *zap.Logger, before, now map[domain.QueueRef]kept, problems []Problem, snap *Snapshot) {
	for ref, k := range now {
		if b, ok := before[ref]; ok && strings.Join(b.problems, "\n") == strings.Join(k.problems, "\n") {
			continue
		}
		var first Problem
		for _, p := range problems {
			if p.File == k.file && !p.Warning {
				first = p
				break
			}
		}
		log.Warn("hosts folder: queue file invalid, its last valid version stays in force",
			zap.String("file", k.file), zap.String("jsonPath", first.JSONPath), zap.String("reason", first.Reason),
			zap.String("host", ref.Host), zap.String("queue", ref.Queue), zap.Strings("problems", k.problems))
	}
	for ref, b := range before {
		if _, still := now[ref]; still {
			continue
		}
		if h, ok := snap.Host(ref.Host); ok && h.Queues[ref.Queue] != nil {
			log.Info("hosts folder: queue file valid again", zap.String("file", b.file),
				zap.String("host", ref.Host), zap.String("queue", ref.Queue))
		}
	}
}
