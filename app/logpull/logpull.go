// Package logpull is the `logs pull` use case (SPEC §9): mirror every new
// line of a server's event log, and every payload those lines archived,
// into a local store that keeps them after the server has pruned them.
//
// Pulling is idempotent and resumable. Each day file is read from the
// offset the store has for it; lines and the new offset are committed
// together, a batch at a time, so a pull that is interrupted (killed, a
// dropped connection) resumes after the last committed batch, and a pull
// right after another adds nothing. Payloads are fetched after the lines:
// a committed line marks the bodies it archived as wanted, so an
// interrupted pull fetches them next time.
package logpull

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

// Source is the server's log API (SPEC §8), for one host and one user.
type Source interface {
	// Days lists the day files.
	Days(ctx context.Context) ([]tasklog.Day, error)
	// Lines reads a day file from a byte offset: whole newline-ended lines,
	// and the offset to ask from next. A pruned day is KindNotFound.
	Lines(ctx context.Context, day string, offset int64) (body io.ReadCloser, next int64, err error)
	// Payload fetches an archived body. One that aged out is KindNotFound;
	// one too large to hold is KindTooLarge.
	Payload(ctx context.Context, queue, id, file string) ([]byte, error)
}

// LineStore keeps the lines and how far each day file has been read.
type LineStore interface {
	Cursor(ctx context.Context, source, day string) (tasklog.Cursor, error)
	// Commit stores lines and moves the day's cursor to next atomically,
	// skipping lines already stored, and returns how many were new.
	Commit(ctx context.Context, source, day string, next tasklog.Cursor, lines []tasklog.Line) (int, error)
}

// PayloadStore keeps the archived bodies.
type PayloadStore interface {
	Wanted(ctx context.Context, source string) ([]tasklog.PayloadRef, error)
	SavePayload(ctx context.Context, ref tasklog.PayloadRef, body []byte) error
	PayloadGone(ctx context.Context, ref tasklog.PayloadRef) error
}

// Options tune a Puller.
type Options struct {
	// Source keys the lines: the server host pulled from, as
	// tasklog.CanonicalHost gives it.
	Source string
	// Batch is the most lines committed in one transaction (default 1000).
	Batch int
	// Limit stops a pull after it has read this many lines (0: no limit);
	// the next pull goes on from there.
	Limit int
	// Warn reports what a pull skipped and why (default: nothing).
	Warn func(msg string)
}

// DefaultBatch is the number of lines per transaction when Options.Batch is 0.
const DefaultBatch = 1000

// maxLine bounds one event line; real ones are a few hundred bytes.
const maxLine = 1 << 20

// MaxBatchBytes bounds the lines of one batch, in bytes, beside
// Options.Batch: a batch is held in memory until it commits, and a server
// (broken, or not ours) that sent a thousand lines near maxLine would have
// it hold a GiB. Real lines make batches of a few hundred KiB.
const MaxBatchBytes = 4 << 20

// Puller mirrors one server host into a store.
type Puller struct {
	src      Source
	lines    LineStore
	payloads PayloadStore
	opts     Options
}

// New makes a Puller. lines and payloads are usually the same store.
func New(src Source, lines LineStore, payloads PayloadStore, opts Options) *Puller {
	if opts.Batch <= 0 {
		opts.Batch = DefaultBatch
	}
	if opts.Warn == nil {
		opts.Warn = func(string) {}
	}
	return &Puller{src: src, lines: lines, payloads: payloads, opts: opts}
}

// Summary is what one pull did.
type Summary struct {
	Days             int  // day files read (ones with bytes not pulled yet)
	Lines            int  // new lines stored
	Payloads         int  // bodies stored
	GoneDays         int  // day files listed but pruned before they were read
	GonePayloads     int  // bodies aged out on the server before they were fetched
	TooLargePayloads int  // bodies over the client's cap, skipped
	BadLines         int  // lines that are not event lines, skipped
	Limited          bool // stopped at Options.Limit; more may be waiting
}

// String is the one-line summary `logs pull` prints.
func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %s, %s", plural(s.Days, "day file"), plural(s.Lines, "new line"), plural(s.Payloads, "payload"))
	if s.GoneDays > 0 {
		fmt.Fprintf(&b, ", %s gone from the server", plural(s.GoneDays, "day file"))
	}
	if s.GonePayloads > 0 {
		fmt.Fprintf(&b, ", %s gone from the server", plural(s.GonePayloads, "payload"))
	}
	if s.TooLargePayloads > 0 {
		fmt.Fprintf(&b, ", %s too large to mirror", plural(s.TooLargePayloads, "payload"))
	}
	if s.BadLines > 0 {
		fmt.Fprintf(&b, ", %s skipped (not event lines)", plural(s.BadLines, "line"))
	}
	if s.Limited {
		b.WriteString(", stopped at the limit")
	}
	return b.String()
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// add sums two summaries, for a follow's total.
func (s Summary) add(o Summary) Summary {
	return Summary{
		Days: s.Days + o.Days, Lines: s.Lines + o.Lines, Payloads: s.Payloads + o.Payloads,
		GoneDays: s.GoneDays + o.GoneDays, GonePayloads: s.GonePayloads + o.GonePayloads,
		TooLargePayloads: s.TooLargePayloads + o.TooLargePayloads, BadLines: s.BadLines + o.BadLines,
	}
}

// errLimit ends the line phase of a pull at Options.Limit.
var errLimit = errors.New("line limit reached")

// Pull mirrors what is new: first the lines of every day file, oldest day
// first, then the payloads they archived. What was committed before an
// error stays committed.
func (p *Puller) Pull(ctx context.Context) (Summary, error) {
	var run pullRun
	days, err := p.src.Days(ctx)
	if err != nil {
		return run.sum, fmt.Errorf("list day files: %w", err)
	}
	slices.SortFunc(days, func(a, b tasklog.Day) int { return strings.Compare(a.Day, b.Day) })
	for _, d := range days {
		err := p.pullDay(ctx, d, &run)
		if errors.Is(err, errLimit) {
			run.sum.Limited = true
			break
		}
		if err != nil {
			return run.sum, err
		}
	}
	// The payloads of the lines committed so far, limit or not: a line in
	// the store should have its bodies.
	if err := p.pullPayloads(ctx, &run.sum); err != nil {
		return run.sum, err
	}
	return run.sum, nil
}

// pullRun is the state of one Pull.
type pullRun struct {
	sum   Summary
	taken int // lines read and committed, new or not, for Options.Limit
}

// pullDay reads one day file from its cursor to the size the server listed.
func (p *Puller) pullDay(ctx context.Context, d tasklog.Day, run *pullRun) error {
	cur, err := p.lines.Cursor(ctx, p.opts.Source, d.Day)
	if err != nil {
		return err
	}
	if d.Size < cur.Offset {
		// Day files only grow; a shorter one was deleted and started again
		// (by hand: pruning never touches today's file). Its lines would
		// reuse keys of lines already stored, so they are not pulled.
		p.opts.Warn(fmt.Sprintf("day file %s is %d bytes on the server but %d were pulled: it was replaced; not pulling it",
			d.Day, d.Size, cur.Offset))
		return nil
	}
	if cur.Offset >= d.Size {
		return nil // nothing new
	}
	run.sum.Days++
	for cur.Offset < d.Size {
		body, next, err := p.src.Lines(ctx, d.Day, cur.Offset)
		if domain.KindOf(err) == domain.KindNotFound {
			run.sum.GoneDays++ // pruned since it was listed: what we have, we keep
			return nil
		}
		if offsetRefused(err) {
			// The file is as long as the cursor again but has no line
			// start there: it lost its end after it was pulled (a power
			// loss took lines not flushed yet) and grew again, or it was
			// replaced. As with a shorter file, its new lines would reuse
			// keys of lines already stored; and failing here would stop
			// every later day from being pulled, on every pull.
			p.opts.Warn(fmt.Sprintf("day file %s has no line at offset %d, where the last pull ended: it was cut or replaced; not pulling it",
				d.Day, cur.Offset))
			return nil
		}
		if err != nil {
			return err
		}
		advanced, err := p.readAnswer(ctx, d.Day, cur, body, next, run)
		body.Close()
		if err != nil {
			return err
		}
		if !cur.Less(advanced) {
			return nil // the server has no whole line past the cursor yet
		}
		cur = advanced
	}
	return nil
}

// readAnswer stores the lines of one answer, a batch per transaction, and
// returns the cursor after it. A batch that ends inside the answer
// records how many of its lines are stored (Cursor.Skip), since where a
// line ends in the file is not known when the server leaves out lines the
// user may not read.
func (p *Puller) readAnswer(ctx context.Context, day string, cur tasklog.Cursor, body io.Reader,
	next int64, run *pullRun) (tasklog.Cursor, error) {
	r := bufio.NewReaderSize(body, 64<<10)
	off := cur.Offset // the key offset of the next line (see tasklog.Key)
	read := 0         // lines of this answer read
	var batch []tasklog.Line
	held := 0 // bytes of the lines in batch
	commit := func(to tasklog.Cursor) error {
		added, err := p.lines.Commit(ctx, p.opts.Source, day, to, batch)
		if err != nil {
			return err
		}
		run.sum.Lines += added
		run.taken += len(batch)
		batch, held = batch[:0], 0
		return nil
	}
	for {
		raw, err := readLine(r)
		if err == io.EOF {
			break
		}
		if err != nil {
			return cur, fmt.Errorf("read day file %s at %d: %w", day, off, err)
		}
		key := off
		off += int64(len(raw)) + 1
		read++
		if read <= cur.Skip {
			continue // stored by an earlier batch
		}
		line, err := tasklog.ParseLine(raw)
		if err != nil {
			// The server writes only event lines; one that is not would
			// otherwise stop every pull here from now on.
			p.opts.Warn(fmt.Sprintf("day file %s, line at %d skipped: %v", day, key, err))
			run.sum.BadLines++
			continue
		}
		line.Key = tasklog.Key{Source: p.opts.Source, Day: day, Offset: key}
		if held+len(raw) > MaxBatchBytes && len(batch) > 0 {
			// Full by its bytes: commit the lines before this one, which
			// starts the next batch (Skip: read - 1).
			if err := commit(tasklog.Cursor{Offset: cur.Offset, Skip: read - 1}); err != nil {
				return cur, err
			}
		}
		batch = append(batch, line)
		held += len(raw)

		limited := p.opts.Limit > 0 && run.taken+len(batch) >= p.opts.Limit
		if len(batch) == p.opts.Batch || limited {
			if err := commit(tasklog.Cursor{Offset: cur.Offset, Skip: read}); err != nil {
				return cur, err
			}
			if limited {
				return cur, errLimit
			}
		}
	}
	// The whole answer is in: next time, ask from where the server said.
	end := tasklog.Cursor{Offset: next}
	if err := commit(end); err != nil {
		return cur, err
	}
	return end, nil
}

// readLine reads one newline-ended line, without its newline. io.EOF means
// the answer ended cleanly; a last line without its newline means the
// answer was cut off, and is not a line.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxLine {
			return nil, fmt.Errorf("a line longer than %d bytes", maxLine)
		}
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && len(line) == 0:
			return nil, io.EOF
		case err == io.EOF:
			return nil, fmt.Errorf("the answer ended inside a line: %w", io.ErrUnexpectedEOF)
		default:
			return nil, err
		}
	}
}

// pullPayloads fetches every body the store wants from this source. A body
// that aged out on the server is given up, and so is one too large to hold
// (a progress.jsonl that grew past the cap), with a warning: it would fail
// every pull from then on, and stop the bodies after it from being
// fetched. Either is asked for again when a later line archives it, and a
// body stored before is kept. One the user may no longer read
// is left wanted (the next pull asks again) and reported; anything else
// (the server is down, the pull was interrupted) ends the pull.
func (p *Puller) pullPayloads(ctx context.Context, sum *Summary) error {
	refs, err := p.payloads.Wanted(ctx, p.opts.Source)
	if err != nil {
		return err
	}
	var refused []error
	for _, ref := range refs {
		body, err := p.src.Payload(ctx, ref.Queue, ref.ID, ref.File)
		switch domain.KindOf(err) {
		case domain.KindNotFound:
			if err := p.payloads.PayloadGone(ctx, ref); err != nil {
				return err
			}
			sum.GonePayloads++
			continue
		case domain.KindTooLarge:
			p.opts.Warn(fmt.Sprintf("payload %s of task %s in queue %s skipped: %v", ref.File, ref.ID, ref.Queue, err))
			if err := p.payloads.PayloadGone(ctx, ref); err != nil {
				return err
			}
			sum.TooLargePayloads++
			continue
		case domain.KindForbidden, domain.KindUnauthorized:
			refused = append(refused, err)
			continue
		}
		if err != nil {
			return err
		}
		if err := p.payloads.SavePayload(ctx, ref, body); err != nil {
			return err
		}
		sum.Payloads++
	}
	if len(refused) > 0 {
		return fmt.Errorf("%d payloads refused, first: %w", len(refused), refused[0])
	}
	return nil
}

// Follow pulls now and then every interval until ctx is done, reporting
// each pull to report (errors included: a server that is down for a while
// is tried again). It returns the sum of every pull.
func (p *Puller) Follow(ctx context.Context, every time.Duration, report func(Summary, error)) Summary {
	var total Summary
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return total
		case <-timer.C:
		}
		sum, err := p.Pull(ctx)
		if ctx.Err() != nil && err != nil {
			err = nil // interrupted: not a failure of the server
		}
		total = total.add(sum)
		report(sum, err)
		timer.Reset(every)
	}
}

// offsetRefused reports whether the server refused the offset asked from
// (SPEC §8's invalid_offset): not at a line start, or past the file's end.
func offsetRefused(err error) bool {
	var e *domain.Error
	return errors.As(err, &e) && e.Code == domain.CodeInvalidOffset
}
