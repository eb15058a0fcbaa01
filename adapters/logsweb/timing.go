package logsweb

import (
	"time"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

// timing is how long a task waited and ran, as far as its trail in the
// mirror tells: "" where the trail does not say (not claimed yet, not
// finished yet, or the line aged out before it was pulled).
type timing struct {
	Waited string // posted → first claim
	Ran    string // the last claim → the end (result, failure, timeout, cancel)
	Total  string // posted → the end
	Claims int
	Ended  bool
}

// timingOf reads a trail, oldest first. A task retried after it failed
// runs again: its end is the last one, and its run the claim before it.
func timingOf(lines []tasklog.Line) timing {
	var posted, firstClaim, lastClaim, ranFrom, end time.Time
	var tm timing
	for _, l := range lines {
		switch {
		case l.Event == domain.EventPosted && posted.IsZero():
			posted = l.At
		case l.Event == domain.EventClaimed:
			tm.Claims++
			if firstClaim.IsZero() {
				firstClaim = l.At
			}
			lastClaim = l.At
		case ends(l.Event):
			end, ranFrom = l.At, lastClaim
		case l.Event == domain.EventRetried:
			end, ranFrom = time.Time{}, time.Time{}
		}
	}
	tm.Ended = !end.IsZero()
	tm.Waited = span(posted, firstClaim)
	tm.Ran = span(ranFrom, end)
	tm.Total = span(posted, end)
	return tm
}

// ends tells the events that make a task terminal.
func ends(e domain.EventKind) bool {
	switch e {
	case domain.EventResult, domain.EventFailed, domain.EventTimeout, domain.EventCancelled:
		return true
	}
	return false
}

// span is the time from a to b for a person: milliseconds under a
// minute, seconds beyond; "" when either end is unknown.
func span(a, b time.Time) string {
	if a.IsZero() || b.IsZero() || b.Before(a) {
		return ""
	}
	d := b.Sub(a)
	if d < time.Minute {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
