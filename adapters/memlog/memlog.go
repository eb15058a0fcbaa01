// Package memlog is an event log kept in memory, in order: for tests of the
// use cases and of the adapters built on them, where the event log's files
// are beside the point (adapters/eventlog has its own tests).
package memlog

import (
	"context"
	"sync"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

var _ ports.EventLog = (*Log)(nil)

// Log keeps every event appended to it. The zero Log is ready to use.
type Log struct {
	mu     sync.Mutex
	events []domain.Event
	fail   error
	before func()
}

// Append records ev, or returns the error set with Fail.
func (l *Log) Append(_ context.Context, ev domain.Event, _ bool) error {
	l.mu.Lock()
	before := l.before
	l.mu.Unlock()
	if before != nil {
		before()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return l.fail
	}
	l.events = append(l.events, ev)
	return nil
}

// Fail makes every later Append return err (nil: succeed again).
func (l *Log) Fail(err error) {
	l.mu.Lock()
	l.fail = err
	l.mu.Unlock()
}

// BeforeAppend runs fn at the start of every later Append, outside the
// log's lock: a test can widen the window between a store write and its
// event with it.
func (l *Log) BeforeAppend(fn func()) {
	l.mu.Lock()
	l.before = fn
	l.mu.Unlock()
}

// Events returns every event so far, in order.
func (l *Log) Events() []domain.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]domain.Event(nil), l.events...)
}

// Of returns the events of one task, in order.
func (l *Log) Of(id string) []domain.Event {
	var out []domain.Event
	for _, ev := range l.Events() {
		if ev.Task.ID == id {
			out = append(out, ev)
		}
	}
	return out
}

// Kinds returns the kinds of one task's events, in order.
func (l *Log) Kinds(id string) []domain.EventKind {
	var out []domain.EventKind
	for _, ev := range l.Of(id) {
		out = append(out, ev.Kind)
	}
	return out
}
