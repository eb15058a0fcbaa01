package logpull_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/adapters/sqlitelogs"
	"github.com/taskhoster/taskhoster/app/logpull"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

const host = "task.example.com"

// fakeServer is the log API of SPEC §8 over day files held in memory: it
// answers whole lines of one host whose queue the user may read, from a
// byte offset that must start a line, at most perAnswer lines at a time.
type fakeServer struct {
	mu        sync.Mutex
	days      map[string][]byte // day → file content, every host and queue
	pruned    map[string]bool   // listed, but 404 when read (pruned in between)
	payloads  map[string][]byte // "queue/id/file" → body
	forbidden map[string]bool   // "queue/id/file" the user may not read
	tooLarge  map[string]bool   // "queue/id/file" over the client's cap
	readable  map[string]bool   // queues of host the user may read
	perAnswer int               // 0: no cap
	cutAfter  int               // >0: drop the connection inside the line after this many
	asked     []string          // "day@offset" of every Lines call
}

var _ logpull.Source = (*fakeServer)(nil)

func newFakeServer() *fakeServer {
	return &fakeServer{
		days: map[string][]byte{}, pruned: map[string]bool{}, payloads: map[string][]byte{},
		forbidden: map[string]bool{}, tooLarge: map[string]bool{}, readable: map[string]bool{"resize": true},
	}
}

// appendLine writes an event line to day's file and returns it.
func (f *fakeServer) appendLine(day, host, queue, id string, ev domain.EventKind, archived ...string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := bytes.Count(f.days[day], []byte("\n"))
	at, _ := time.Parse(time.DateOnly, day)
	at = at.Add(time.Duration(n) * time.Second)
	if archived == nil {
		archived = []string{}
	}
	arch, _ := jsonList(archived)
	line := fmt.Sprintf(`{"t":%d,"at":%q,"host":%q,"queue":%q,"id":%q,"event":%q,"status":"pending","attempts":0,"worker":null,"bytes":{"item":9,"progress":0,"result":0,"error":0},"archived":%s}`,
		at.Unix(), at.Format("2006-01-02T15:04:05.000Z"), host, queue, id, ev, arch)
	f.days[day] = append(f.days[day], line+"\n"...)
	return line
}

func jsonList(ss []string) (string, error) {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ",") + "]", nil
}

func (f *fakeServer) Days(context.Context) ([]tasklog.Day, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var days []tasklog.Day
	for d, b := range f.days {
		days = append(days, tasklog.Day{Day: d, Size: int64(len(b))})
	}
	return days, nil
}

func (f *fakeServer) Lines(_ context.Context, day string, offset int64) (io.ReadCloser, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, fmt.Sprintf("%s@%d", day, offset))
	file, ok := f.days[day]
	if !ok || f.pruned[day] {
		return nil, 0, domain.E(domain.KindNotFound, "not_found", "no day file %s", day)
	}
	if offset < 0 || offset > int64(len(file)) || (offset > 0 && file[offset-1] != '\n') {
		return nil, 0, domain.E(domain.KindInvalid, "invalid_offset", "offset %d does not start a line", offset)
	}
	var out bytes.Buffer
	next, sent := offset, 0
	for next < int64(len(file)) && (f.perAnswer == 0 || sent < f.perAnswer) {
		end := next + int64(bytes.IndexByte(file[next:], '\n')) + 1
		line := file[next:end]
		next = end
		if !bytes.Contains(line, []byte(`"host":"`+host+`"`)) || !f.readable[queueOf(line)] {
			continue
		}
		if f.cutAfter > 0 && sent == f.cutAfter {
			out.Write(line[:len(line)/2]) // the connection drops mid-line
			return io.NopCloser(&out), next, nil
		}
		out.Write(line)
		sent++
	}
	return io.NopCloser(&out), next, nil
}

func queueOf(line []byte) string {
	_, rest, _ := bytes.Cut(line, []byte(`"queue":"`))
	q, _, _ := bytes.Cut(rest, []byte(`"`))
	return string(q)
}

func (f *fakeServer) Payload(_ context.Context, queue, id, file string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := queue + "/" + id + "/" + file
	if f.forbidden[key] {
		return nil, domain.E(domain.KindForbidden, "forbidden", "not yours")
	}
	if f.tooLarge[key] {
		return nil, domain.E(domain.KindTooLarge, "too_large", "%s is over the cap", key)
	}
	body, ok := f.payloads[key]
	if !ok {
		return nil, domain.E(domain.KindNotFound, "not_found", "no payload %s", key)
	}
	return slices.Clone(body), nil
}

func mustStore(t *testing.T) *sqlitelogs.Store {
	t.Helper()
	s, err := sqlitelogs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func puller(src logpull.Source, s *sqlitelogs.Store, opts logpull.Options) *logpull.Puller {
	opts.Source = host
	return logpull.New(src, s, s, opts)
}

func mustPull(t *testing.T, p *logpull.Puller) logpull.Summary {
	t.Helper()
	sum, err := p.Pull(context.Background())
	if err != nil {
		t.Fatalf("pull: %v (did %s)", err, sum)
	}
	return sum
}

// stored is every line in the mirror, oldest first, as the server sent it.
func stored(t *testing.T, s *sqlitelogs.Store) []string {
	t.Helper()
	var out []string
	q := tasklog.Query{Limit: tasklog.MaxLimit}
	for {
		page, err := s.Events(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range page.Lines {
			out = append(out, l.Raw)
		}
		if page.Older == nil {
			slices.Reverse(out)
			return out
		}
		q.Before = page.Older
	}
}

func id(n int) string { return fmt.Sprintf("%016x", n) }

// world is a server with lines of this host (readable or not) and of
// another host, on two days, and the readable ones in order.
func world() (*fakeServer, []string) {
	f := newFakeServer()
	var want []string
	for i := range 12 {
		day := "2026-07-25"
		if i >= 6 {
			day = "2026-07-26"
		}
		want = append(want, f.appendLine(day, host, "resize", id(i), domain.EventPosted))
		f.appendLine(day, host, "secret", id(100+i), domain.EventPosted)
		f.appendLine(day, "other.example.com", "resize", id(200+i), domain.EventPosted)
	}
	return f, want
}

func TestPullMirrorsReadableLinesOnce(t *testing.T) {
	f, want := world()
	s := mustStore(t)
	p := puller(f, s, logpull.Options{})

	sum := mustPull(t, p)
	if diff := cmp.Diff(logpull.Summary{Days: 2, Lines: 12}, sum); diff != "" {
		t.Errorf("first pull (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, stored(t, s)); diff != "" {
		t.Fatalf("mirror (-want +got):\n%s", diff)
	}

	f.asked = nil
	if sum := mustPull(t, p); sum != (logpull.Summary{}) {
		t.Errorf("second pull did %s, want nothing", sum)
	}
	if len(f.asked) != 0 {
		t.Errorf("second pull read day files again: %v", f.asked)
	}

	// New lines: only they are read and stored.
	want = append(want, f.appendLine("2026-07-26", host, "resize", id(50), domain.EventClaimed))
	f.appendLine("2026-07-26", host, "secret", id(51), domain.EventClaimed)
	want = append(want, f.appendLine("2026-07-27", host, "resize", id(52), domain.EventPosted))
	f.asked = nil
	if diff := cmp.Diff(logpull.Summary{Days: 2, Lines: 2}, mustPull(t, p)); diff != "" {
		t.Errorf("third pull (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, stored(t, s)); diff != "" {
		t.Errorf("mirror (-want +got):\n%s", diff)
	}
	for _, a := range f.asked {
		if strings.HasSuffix(a, "@0") && strings.HasPrefix(a, "2026-07-26") {
			t.Errorf("re-read 2026-07-26 from the start: %v", f.asked)
		}
	}
}

func TestKeysAreFileOffsetsWhenEveryLineIsReadable(t *testing.T) {
	f := newFakeServer()
	var offsets []int64
	for i := range 3 {
		offsets = append(offsets, int64(len(f.days["2026-07-26"])))
		f.appendLine("2026-07-26", host, "resize", id(i), domain.EventPosted)
	}
	s := mustStore(t)
	mustPull(t, puller(f, s, logpull.Options{}))
	page, err := s.Events(context.Background(), tasklog.Query{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, l := range slices.Backward(page.Lines) {
		got = append(got, l.Key.Offset)
	}
	if diff := cmp.Diff(offsets, got); diff != "" {
		t.Errorf("keys (-file offsets +got):\n%s", diff)
	}
}

func TestPullKeepsLinesOfPrunedDays(t *testing.T) {
	f, want := world()
	s := mustStore(t)
	p := puller(f, s, logpull.Options{})
	mustPull(t, p)

	// The server prunes 2026-07-25; 2026-07-26 grows, and is pruned between
	// the listing and the read.
	delete(f.days, "2026-07-25")
	f.appendLine("2026-07-26", host, "resize", id(60), domain.EventPosted)
	f.pruned["2026-07-26"] = true
	sum := mustPull(t, p)
	if diff := cmp.Diff(logpull.Summary{Days: 1, GoneDays: 1}, sum); diff != "" {
		t.Errorf("pull after pruning (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, stored(t, s)); diff != "" {
		t.Errorf("mirror lost lines (-want +got):\n%s", diff)
	}
}

// failingStore fails the commit number failOn (0: none), as a crash
// would, and counts the lines it was handed.
type failingStore struct {
	*sqlitelogs.Store
	commits, failOn, lines int
}

func (s *failingStore) Commit(ctx context.Context, source, day string, next tasklog.Cursor, lines []tasklog.Line) (int, error) {
	s.commits++
	if s.commits == s.failOn {
		return 0, errors.New("power cut")
	}
	s.lines += len(lines)
	return s.Store.Commit(ctx, source, day, next, lines)
}

// TestInterruptedPullResumes stops a pull part-way in each way it can stop,
// then pulls again: the mirror ends with every line exactly once.
func TestInterruptedPullResumes(t *testing.T) {
	cases := []struct {
		name      string
		perAnswer int // the server's cap on lines per answer
		batch     int
		interrupt func(t *testing.T, f *fakeServer, s *sqlitelogs.Store) logpull.Summary
	}{
		{"a commit fails inside a long answer", 0, 2, func(t *testing.T, f *fakeServer, s *sqlitelogs.Store) logpull.Summary {
			fs := &failingStore{Store: s, failOn: 3}
			sum, err := logpull.New(f, fs, s, logpull.Options{Source: host, Batch: 2}).Pull(context.Background())
			if err == nil {
				t.Error("the pull did not fail")
			}
			return sum
		}},
		{"a commit fails across capped answers", 4, 3, func(t *testing.T, f *fakeServer, s *sqlitelogs.Store) logpull.Summary {
			fs := &failingStore{Store: s, failOn: 4}
			sum, err := logpull.New(f, fs, s, logpull.Options{Source: host, Batch: 3}).Pull(context.Background())
			if err == nil {
				t.Error("the pull did not fail")
			}
			return sum
		}},
		{"the connection drops mid-line", 0, 2, func(t *testing.T, f *fakeServer, s *sqlitelogs.Store) logpull.Summary {
			f.cutAfter = 5
			defer func() { f.cutAfter = 0 }()
			sum, err := puller(f, s, logpull.Options{Batch: 2}).Pull(context.Background())
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("pull: err = %v, want io.ErrUnexpectedEOF", err)
			}
			return sum
		}},
		{"the pull stops at its limit", 0, 2, func(t *testing.T, f *fakeServer, s *sqlitelogs.Store) logpull.Summary {
			sum, err := puller(f, s, logpull.Options{Batch: 2, Limit: 5}).Pull(context.Background())
			if err != nil || !sum.Limited || sum.Lines != 5 {
				t.Errorf("pull with a limit: %s, %v; want 5 lines and stopped at the limit", sum, err)
			}
			return sum
		}},
		{"the pull stops at its limit across capped answers", 2, 10, func(t *testing.T, f *fakeServer, s *sqlitelogs.Store) logpull.Summary {
			sum, err := puller(f, s, logpull.Options{Batch: 10, Limit: 3}).Pull(context.Background())
			if err != nil || !sum.Limited || sum.Lines != 3 {
				t.Errorf("pull with a limit: %s, %v; want 3 lines and stopped at the limit", sum, err)
			}
			return sum
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, want := world()
			f.perAnswer = tc.perAnswer
			s := mustStore(t)
			sum := tc.interrupt(t, f, s)
			partial := stored(t, s)
			if len(partial) == 0 || len(partial) >= len(want) {
				t.Fatalf("the interrupted pull stored %d of %d lines; the case does not interrupt", len(partial), len(want))
			}
			if diff := cmp.Diff(want[:len(partial)], partial); diff != "" {
				t.Fatalf("interrupted pull stored lines out of order (-want +got):\n%s", diff)
			}

			counting := &failingStore{Store: s}
			rest, err := logpull.New(f, counting, s, logpull.Options{Source: host, Batch: tc.batch}).Pull(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if rest.Lines+sum.Lines != len(want) {
				t.Errorf("the pulls added %d + %d lines, want %d in all", sum.Lines, rest.Lines, len(want))
			}
			if counting.lines != len(want)-len(partial) {
				t.Errorf("the resumed pull handed %d lines to the store, want only the %d it lacked",
					counting.lines, len(want)-len(partial))
			}
			if diff := cmp.Diff(want, stored(t, s)); diff != "" {
				t.Errorf("mirror after resuming (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPullFetchesArchivedPayloads(t *testing.T) {
	f := newFakeServer()
	s := mustStore(t)
	ctx := context.Background()
	p := puller(f, s, logpull.Options{})

	f.appendLine("2026-07-26", host, "resize", id(1), domain.EventPosted, "item")
	f.appendLine("2026-07-26", host, "resize", id(1), domain.EventProgress, "progress")
	f.appendLine("2026-07-26", host, "resize", id(2), domain.EventPosted, "item")  // aged out already
	f.appendLine("2026-07-26", host, "resize", id(3), domain.EventPosted, "item")  // forbidden
	f.appendLine("2026-07-26", host, "resize", id(4), domain.EventPosted, "video") // unknown kind
	f.payloads["resize/"+id(1)+"/item.json"] = []byte(`{"url":"a"}`)
	f.payloads["resize/"+id(1)+"/progress.jsonl"] = []byte("{\"percent\":10}\n")
	f.payloads["resize/"+id(3)+"/item.json"] = []byte(`{}`)
	f.forbidden["resize/"+id(3)+"/item.json"] = true

	sum, err := p.Pull(ctx)
	if domain.KindOf(err) != domain.KindForbidden {
		t.Errorf("pull: err = %v, want the refused payload reported", err)
	}
	if diff := cmp.Diff(logpull.Summary{Days: 1, Lines: 5, Payloads: 2, GonePayloads: 1}, sum); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
	body := func(n int, file string) string {
		b, err := s.Payload(ctx, host, "resize", id(n), file)
		if err != nil {
			return err.Error()
		}
		return string(b)
	}
	if got := body(1, "item.json"); got != `{"url":"a"}` {
		t.Errorf("item.json = %q", got)
	}

	// A second progress is archived: progress.jsonl is fetched again, and
	// the refused item is asked for again (access may have come back).
	f.appendLine("2026-07-26", host, "resize", id(1), domain.EventProgress, "progress")
	f.payloads["resize/"+id(1)+"/progress.jsonl"] = []byte("{\"percent\":10}\n{\"percent\":90}\n")
	delete(f.forbidden, "resize/"+id(3)+"/item.json")
	sum = mustPull(t, p)
	if diff := cmp.Diff(logpull.Summary{Days: 1, Lines: 1, Payloads: 2}, sum); diff != "" {
		t.Errorf("second summary (-want +got):\n%s", diff)
	}
	if got := body(1, "progress.jsonl"); got != "{\"percent\":10}\n{\"percent\":90}\n" {
		t.Errorf("progress.jsonl = %q", got)
	}
	if got := body(3, "item.json"); got != `{}` {
		t.Errorf("item.json of the once refused task = %q", got)
	}
	if sum := mustPull(t, p); sum != (logpull.Summary{}) {
		t.Errorf("third pull did %s, want nothing", sum)
	}
}

func TestPullRefusesAReplacedDayFile(t *testing.T) {
	f, want := world()
	s := mustStore(t)
	var warnings []string
	p := puller(f, s, logpull.Options{Warn: func(m string) { warnings = append(warnings, m) }})
	mustPull(t, p)
	f.days["2026-07-26"] = nil // deleted by hand and started again
	f.appendLine("2026-07-26", host, "resize", id(70), domain.EventPosted)
	if sum := mustPull(t, p); sum.Lines != 0 {
		t.Errorf("pulled %d lines of a replaced file", sum.Lines)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "2026-07-26") {
		t.Errorf("warnings %q", warnings)
	}
	if diff := cmp.Diff(want, stored(t, s)); diff != "" {
		t.Errorf("mirror (-want +got):\n%s", diff)
	}
}

func TestFollowPullsUntilCancelled(t *testing.T) {
	f, want := world()
	s := mustStore(t)
	p := puller(f, s, logpull.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	reports := make(chan logpull.Summary)
	done := make(chan logpull.Summary)
	go func() {
		done <- p.Follow(ctx, time.Millisecond, func(sum logpull.Summary, err error) {
			if err != nil {
				t.Errorf("follow: %v", err)
			}
			select {
			case reports <- sum:
			case <-ctx.Done():
			}
		})
	}()
	next := func() logpull.Summary {
		t.Helper()
		select {
		case sum := <-reports:
			return sum
		case <-time.After(10 * time.Second):
			t.Fatal("no pull within 10s")
			return logpull.Summary{}
		}
	}
	if sum := next(); sum.Lines != len(want) {
		t.Errorf("first round pulled %d lines, want %d", sum.Lines, len(want))
	}
	f.appendLine("2026-07-26", host, "resize", id(80), domain.EventPosted)
	for sum := next(); sum.Lines == 0; sum = next() {
	}
	cancel()
	select {
	case total := <-done:
		if total.Lines != len(want)+1 {
			t.Errorf("follow pulled %d lines in all, want %d", total.Lines, len(want)+1)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not return after cancel")
	}
}

func TestPullSkipsALineThatIsNotAnEventLine(t *testing.T) {
	f := newFakeServer()
	first := f.appendLine("2026-07-26", host, "resize", id(1), domain.EventPosted)
	f.days["2026-07-26"] = append(f.days["2026-07-26"], `{"host":"task.example.com","queue":"resize","id":"nope"}`+"\n"...)
	last := f.appendLine("2026-07-26", host, "resize", id(1), domain.EventClaimed)
	s := mustStore(t)
	var warnings []string
	sum := mustPull(t, puller(f, s, logpull.Options{Warn: func(m string) { warnings = append(warnings, m) }}))
	if sum.Lines != 2 || sum.BadLines != 1 || len(warnings) != 1 {
		t.Errorf("pull: %s, warnings %q; want 2 lines and 1 skipped", sum, warnings)
	}
	if diff := cmp.Diff([]string{first, last}, stored(t, s)); diff != "" {
		t.Errorf("mirror (-want +got):\n%s", diff)
	}
	if sum := mustPull(t, puller(f, s, logpull.Options{})); sum != (logpull.Summary{}) {
		t.Errorf("second pull did %s, want nothing", sum)
	}
}

// TestPullGoesOnPastADayFileCutBelowItsCursor: a power loss can take the
// unflushed end of a day file that a pull had already read; the file then
// grows again, and the pulled offset is no longer where a line starts. The
// server refuses that offset (invalid_offset). That day cannot be pulled
// on (as a replaced file), but the other days must be: one cut file must
// not stop every later pull.
func TestPullGoesOnPastADayFileCutBelowItsCursor(t *testing.T) {
	f, want := world()
	s := mustStore(t)
	var warnings []string
	p := puller(f, s, logpull.Options{Warn: func(m string) { warnings = append(warnings, m) }})
	mustPull(t, p)
	pulled := int64(len(f.days["2026-07-26"]))

	// The power loss keeps the first line; the server goes on writing.
	file := f.days["2026-07-26"]
	f.days["2026-07-26"] = file[:bytes.IndexByte(file, '\n')+1]
	for i := 0; int64(len(f.days["2026-07-26"])) <= pulled; i++ {
		f.appendLine("2026-07-26", "other.example.com", "resize", id(300+i), domain.EventPosted)
	}
	if f.days["2026-07-26"][pulled-1] == '\n' {
		t.Fatal("the pulled offset starts a line again; the case does not cut")
	}
	want = append(want, f.appendLine("2026-07-27", host, "resize", id(90), domain.EventPosted))

	sum, err := p.Pull(context.Background())
	if err != nil {
		t.Fatalf("pull after the cut: %v (did %s)", err, sum)
	}
	if diff := cmp.Diff(want, stored(t, s)); diff != "" {
		t.Errorf("mirror (-want +got):\n%s", diff)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "2026-07-26") {
		t.Errorf("warnings %q, want one about 2026-07-26", warnings)
	}
}

// batchSizes is a store that notes the bytes of lines each commit is
// handed.
type batchSizes struct {
	*sqlitelogs.Store
	bytes []int
}

func (s *batchSizes) Commit(ctx context.Context, source, day string, next tasklog.Cursor, lines []tasklog.Line) (int, error) {
	n := 0
	for _, l := range lines {
		n += len(l.Raw)
	}
	s.bytes = append(s.bytes, n)
	return s.Store.Commit(ctx, source, day, next, lines)
}

// A batch is bounded by its bytes as well as its lines: a server (broken,
// or not ours) that sends lines near the line limit cannot make one batch
// hold a thousand of them, a GiB, in memory. Every line is still stored
// once.
func TestABatchIsBoundedByItsBytes(t *testing.T) {
	src := newFakeServer()
	big := strings.Repeat("w", 256<<10)
	var want []string
	for n := range 40 { // 10 MiB in one answer
		line := src.appendLine("2026-07-25", host, "resize", id(n), domain.EventClaimed)
		line = strings.Replace(line, `{`, fmt.Sprintf(`{"padding":%q,`, big), 1) // a field of a newer server
		want = append(want, line)
	}
	src.days["2026-07-25"] = []byte(strings.Join(want, "\n") + "\n")
	// A pull cut at its second commit resumes after the first: the
	// cursor a batch cut by its bytes leaves names the lines it holds.
	cut := &failingStore{Store: mustStore(t), failOn: 2}
	if _, err := logpull.New(src, cut, cut, logpull.Options{Source: host}).Pull(context.Background()); err == nil {
		t.Fatal("the pull went on past a failed commit")
	}
	s := &batchSizes{Store: cut.Store}
	p := logpull.New(src, s, s, logpull.Options{Source: host})
	if _, err := p.Pull(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, n := range s.bytes {
		if n > logpull.MaxBatchBytes {
			t.Errorf("commit %d was handed %d bytes of lines, over the %d a batch may hold", i, n, logpull.MaxBatchBytes)
		}
	}
	if got := stored(t, s.Store); !slices.Equal(got, want) {
		t.Errorf("stored %d lines, want the %d sent, once each, in order", len(got), len(want))
	}
}

// A body over the client's cap (a progress.jsonl that grew past it) is
// skipped with a warning: the bodies archived after it are still fetched,
// and later pulls do not fail on it again and again.
func TestPullSkipsAPayloadTooLargeToMirror(t *testing.T) {
	f := newFakeServer()
	s := mustStore(t)
	ctx := context.Background()
	var warnings []string
	p := puller(f, s, logpull.Options{Warn: func(m string) { warnings = append(warnings, m) }})

	f.appendLine("2026-07-26", host, "resize", id(1), domain.EventProgress, "progress")
	f.appendLine("2026-07-26", host, "resize", id(2), domain.EventPosted, "item")
	f.payloads["resize/"+id(1)+"/progress.jsonl"] = []byte("{}\n")
	f.tooLarge["resize/"+id(1)+"/progress.jsonl"] = true
	f.payloads["resize/"+id(2)+"/item.json"] = []byte(`{"url":"b"}`)

	sum, err := p.Pull(ctx)
	if err != nil {
		t.Fatalf("pull: %v (did %s)", err, sum)
	}
	if diff := cmp.Diff(logpull.Summary{Days: 1, Lines: 2, Payloads: 1, TooLargePayloads: 1}, sum); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
	if b, err := s.Payload(ctx, host, "resize", id(2), "item.json"); err != nil || string(b) != `{"url":"b"}` {
		t.Errorf("the body after the large one: %q, %v", b, err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], id(1)) {
		t.Errorf("warnings %q, want one naming %s", warnings, id(1))
	}
	if sum := mustPull(t, p); sum != (logpull.Summary{}) {
		t.Errorf("second pull did %s, want nothing", sum)
	}
}
