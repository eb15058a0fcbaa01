package tasklog

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/taskhoster/taskhoster/domain"
)

// Filter narrows the events the browser lists. Every field left zero lets
// everything through; the others must all match, exactly, except that a
// Host, Queue, ID or Worker ending in "*" matches every value starting
// with what comes before it (Prefix).
type Filter struct {
	Host   string
	Queue  string
	ID     string
	Event  domain.EventKind
	Error  string // the error code a line tells (Line.Error)
	Worker string
	From   time.Time // events at or after; zero: no bound
	To     time.Time // events before; zero: no bound
}

// Validate refuses a filter that could never match a stored line (a name
// the server would never write), so a typo says so instead of showing an
// empty page. The error is a domain.Error of KindInvalid.
func (f Filter) Validate() error {
	switch {
	case !validOrPrefix(f.Host, domain.ValidHost, hostChars, 253):
		return invalid("host %q is not a host name, nor the start of one followed by *", f.Host)
	case !validOrPrefix(f.Queue, domain.ValidName, nameChars, 63):
		return invalid("queue %q is not a queue name, nor the start of one followed by *", f.Queue)
	case !validOrPrefix(f.ID, domain.ValidID, hexChars, 16):
		return invalid("task id %q is not 16 lower-case hex characters, nor the first few followed by *", f.ID)
	case f.Event != "" && !validWord(string(f.Event)):
		return invalid("event %q is not an event name", f.Event)
	case f.Error != "" && !validWord(f.Error):
		return invalid("error %q is not an error code", f.Error)
	case utf8.RuneCountInString(strings.TrimSuffix(f.Worker, "*")) > maxWorker:
		return invalid("worker name is longer than %d characters", maxWorker)
	case !f.From.IsZero() && !f.To.IsZero() && !f.From.Before(f.To):
		return invalid("the time range is empty: from %s is not before to %s",
			f.From.UTC().Format(time.RFC3339), f.To.UTC().Format(time.RFC3339))
	}
	return nil
}

// Prefix reads a filter value: the start of the values it matches and
// true when it ends in "*", else the value itself and false.
func Prefix(v string) (string, bool) {
	if p, ok := strings.CutSuffix(v, "*"); ok {
		return p, true
	}
	return v, false
}

// The characters a prefix of each kind of name may hold.
const (
	hostChars = "abcdefghijklmnopqrstuvwxyz0123456789.-"
	nameChars = "abcdefghijklmnopqrstuvwxyz0123456789_-"
	hexChars  = "0123456789abcdef"
)

// validOrPrefix accepts "" (no filter), a whole valid name, or the start
// of one (chars only, at most max of them) followed by "*".
func validOrPrefix(v string, valid func(string) bool, chars string, max int) bool {
	p, prefix := Prefix(v)
	switch {
	case v == "":
		return true
	case !prefix:
		return valid(v)
	}
	return len(p) <= max && strings.Trim(p, chars) == ""
}

// Position is a place in the list of events, newest first: events are
// ordered by time, then by Seq (their order of arrival) among events of the
// same millisecond. A page ends at a position and the next one starts after
// it, so pages stay put while new lines arrive (keyset pagination).
type Position struct {
	Millis int64 // the event's time in Unix milliseconds
	Seq    int64
}

// PositionOf is the position of a stored line.
func PositionOf(l Line) Position { return Position{Millis: l.At.UnixMilli(), Seq: l.Seq} }

// String is the position as it travels in a URL: "<millis>-<seq>".
func (p Position) String() string {
	return strconv.FormatInt(p.Millis, 10) + "-" + strconv.FormatInt(p.Seq, 10)
}

// ParsePosition reads a position from its String form.
func ParsePosition(s string) (Position, error) {
	ms, seq, ok := strings.Cut(s, "-")
	if !ok {
		return Position{}, invalid("position %q is not <millis>-<seq>", s)
	}
	var p Position
	var err1, err2 error
	p.Millis, err1 = strconv.ParseInt(ms, 10, 64)
	p.Seq, err2 = strconv.ParseInt(seq, 10, 64)
	if err1 != nil || err2 != nil || p.Seq < 0 {
		return Position{}, invalid("position %q is not <millis>-<seq>", s)
	}
	return p, nil
}

// Page sizes.
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

// Query asks for one page of events, newest first: the first page, the
// page just older than Before, or the page just newer than After (at most
// one of the two).
type Query struct {
	Filter Filter
	Before *Position
	After  *Position
	Limit  int // 1 to MaxLimit
}

// Validate checks the filter, the page size and the positions.
func (q Query) Validate() error {
	if err := q.Filter.Validate(); err != nil {
		return err
	}
	switch {
	case q.Limit < 1 || q.Limit > MaxLimit:
		return invalid("page size %d is not between 1 and %d", q.Limit, MaxLimit)
	case q.Before != nil && q.After != nil:
		return invalid("a page is either before or after a position, not both")
	}
	return nil
}

// Page is one page of events, newest first, with the positions to ask for
// the neighbouring pages (nil where there is none).
type Page struct {
	Lines []Line
	Newer *Position // ask After this for the newer page
	Older *Position // ask Before this for the older page
}

func invalid(format string, args ...any) error {
	return &domain.Error{Kind: domain.KindInvalid, Code: domain.CodeInvalidFilter, Message: fmt.Sprintf(format, args...)}
}
