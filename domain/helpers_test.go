package domain

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// t0 is the fixed start of every test clock: the seed's postedAt.
var t0 = time.UnixMilli(1751500000000)

const (
	testID    = "9f2c1a0b7d4e6f83"
	testHost  = "task.example.com"
	testQueue = "resize"
)

var testItem = json.RawMessage(`{"url":"https://ex.com/a.png","format":"jpg","width":800}`)

// testSettings are the seed queue's settings: a 60 s lease, a one-day queue
// timeout, one hour of retention from "finished".
func testSettings() Settings { return DefaultSettings() }

// at is t0 advanced by d.
func at(d time.Duration) time.Time { return t0.Add(d) }

// ms is at(d) in the record's milliseconds.
func ms(d time.Duration) int64 { return Millis(at(d)) }

func mustPost(tb testing.TB) Task {
	tb.Helper()
	task, _ := Post(testID, testHost, testQueue, testItem, "alice", t0)
	return task
}

func mustClaim(tb testing.TB, task Task, worker string, now time.Time) Task {
	tb.Helper()
	got, _, err := task.Claim(worker, time.Minute, now)
	if err != nil {
		tb.Fatalf("Claim(%q) at %v: %v", worker, now, err)
	}
	return got
}

func mustFinish(tb testing.TB, task Task, worker string, result string, now time.Time) Task {
	tb.Helper()
	got, _, err := task.Finish(worker, json.RawMessage(result), now)
	if err != nil {
		tb.Fatalf("Finish(%q) at %v: %v", worker, now, err)
	}
	return got
}

func mustRequeue(tb testing.TB, task Task, now time.Time) Task {
	tb.Helper()
	got, _, err := task.Requeue(CauseLease, Retry{}, now)
	if err != nil {
		tb.Fatalf("Requeue at %v: %v", now, err)
	}
	return got
}

func mustTimeout(tb testing.TB, task Task, now time.Time) Task {
	tb.Helper()
	got, _, err := task.Timeout(now)
	if err != nil {
		tb.Fatalf("Timeout at %v: %v", now, err)
	}
	return got
}

func mustFetch(tb testing.TB, task Task, now time.Time) Task {
	tb.Helper()
	got, _, ok := task.Fetch(now)
	if !ok {
		tb.Fatalf("Fetch at %v: not fetched", now)
	}
	return got
}

// checkErr fails unless err is want (nil meaning no error).
func checkErr(tb testing.TB, err, want error) {
	tb.Helper()
	switch {
	case want == nil && err != nil:
		tb.Fatalf("err = %v, want nil", err)
	case want != nil && !errors.Is(err, want):
		tb.Fatalf("err = %v, want %v", err, want)
	}
}
