package domain

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPost(t *testing.T) {
	tests := []struct {
		name     string
		postedBy string
		want     Task
	}{
		{
			name:     "by a user",
			postedBy: "alice",
			want: Task{
				ID: testID, Host: testHost, Queue: testQueue, Status: Pending, Item: testItem,
				PostedBy: ptr("alice"), PostedAt: ms(0), UpdatedAt: ms(0),
			},
		},
		{
			name:     "anonymous public post has postedBy null",
			postedBy: "",
			want: Task{
				ID: testID, Host: testHost, Queue: testQueue, Status: Pending, Item: testItem,
				PostedAt: ms(0), UpdatedAt: ms(0),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ev := Post(testID, testHost, testQueue, testItem, tc.postedBy, t0)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("task (-want +got):\n%s", d)
			}
			wantEv := Event{Kind: EventPosted, At: t0, Task: tc.want}
			if d := cmp.Diff(wantEv, ev); d != "" {
				t.Errorf("event (-want +got):\n%s", d)
			}
		})
	}
}

// Fixtures in each state, built only through the state machine.
func pendingTask(tb testing.TB) Task { return mustPost(tb) }

func processingTask(tb testing.TB) Task {
	return mustClaim(tb, mustPost(tb), "box-1", at(time.Second))
}

func finishedTask(tb testing.TB) Task {
	return mustFinish(tb, processingTask(tb), "box-1", `{"ok":true}`, at(10*time.Second))
}

func failedTask(tb testing.TB) Task {
	return mustTimeout(tb, processingTask(tb), at(25*time.Hour))
}

func requeuedTask(tb testing.TB) Task {
	return mustRequeue(tb, processingTask(tb), at(2*time.Minute))
}

func TestClaim(t *testing.T) {
	tests := []struct {
		name    string
		task    func(testing.TB) Task
		now     time.Time
		lease   time.Duration
		want    func(Task) Task // applied to the task before the claim
		wantErr error
	}{
		{
			name:  "first claim makes attempts 1 and leases until now+lease",
			task:  pendingTask,
			now:   at(5 * time.Second),
			lease: time.Minute,
			want: func(t Task) Task {
				t.Status = Processing
				t.Attempts = 1
				t.Lease = &Lease{Worker: "box-1", Until: ms(5*time.Second + time.Minute)}
				t.UpdatedAt = ms(5 * time.Second)
				return t
			},
		},
		{
			name:  "claim after a re-queue counts a second attempt",
			task:  requeuedTask,
			now:   at(3 * time.Minute),
			lease: 30 * time.Second,
			want: func(t Task) Task {
				t.Status = Processing
				t.Attempts = 2
				t.Lease = &Lease{Worker: "box-1", Until: ms(3*time.Minute + 30*time.Second)}
				t.UpdatedAt = ms(3 * time.Minute)
				return t
			},
		},
		{name: "processing task", task: processingTask, now: at(time.Minute), lease: time.Minute, wantErr: ErrNotPending},
		{name: "finished task", task: finishedTask, now: at(time.Minute), lease: time.Minute, wantErr: ErrNotPending},
		{name: "failed task", task: failedTask, now: at(26 * time.Hour), lease: time.Minute, wantErr: ErrNotPending},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.task(t)
			snapshot := before.Clone()
			got, ev, err := before.Claim("box-1", tc.lease, tc.now)
			checkErr(t, err, tc.wantErr)
			if d := cmp.Diff(snapshot, before); d != "" {
				t.Errorf("Claim mutated its receiver (-before +after):\n%s", d)
			}
			if tc.wantErr != nil {
				if d := cmp.Diff(before, got); d != "" {
					t.Errorf("refused claim changed the task (-want +got):\n%s", d)
				}
				if d := cmp.Diff(Event{}, ev); d != "" {
					t.Errorf("refused claim made an event:\n%s", d)
				}
				return
			}
			want := tc.want(before.Clone())
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("task (-want +got):\n%s", d)
			}
			wantEv := Event{Kind: EventClaimed, At: tc.now, Worker: "box-1", Task: want}
			if d := cmp.Diff(wantEv, ev); d != "" {
				t.Errorf("event (-want +got):\n%s", d)
			}
		})
	}
}

func TestReportProgress(t *testing.T) {
	progress := json.RawMessage(`{"percent":40}`)
	tests := []struct {
		name    string
		task    func(testing.TB) Task
		worker  string
		now     time.Time
		wantErr error
	}{
		{name: "lease holder within its lease", task: processingTask, worker: "box-1", now: at(12 * time.Second)},
		{
			// The lease lapsed but no sweep re-queued it yet: it is still
			// processing and leased to box-1, so its progress counts.
			name: "lease holder after the lease lapsed, before the sweep", task: processingTask,
			worker: "box-1", now: at(5 * time.Minute),
		},
		{name: "another worker", task: processingTask, worker: "box-2", now: at(12 * time.Second), wantErr: ErrNotLeaseHolder},
		{name: "pending task", task: pendingTask, worker: "box-1", now: at(12 * time.Second), wantErr: ErrNotProcessing},
		{name: "re-queued task, former holder", task: requeuedTask, worker: "box-1", now: at(3 * time.Minute), wantErr: ErrNotProcessing},
		{name: "finished task", task: finishedTask, worker: "box-1", now: at(time.Minute), wantErr: ErrNotProcessing},
		{name: "failed task", task: failedTask, worker: "box-1", now: at(26 * time.Hour), wantErr: ErrNotProcessing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.task(t)
			got, ev, err := before.ReportProgress(tc.worker, progress, time.Minute, tc.now)
			checkErr(t, err, tc.wantErr)
			if tc.wantErr != nil {
				if d := cmp.Diff(before, got); d != "" {
					t.Errorf("refused progress changed the task (-want +got):\n%s", d)
				}
				if d := cmp.Diff(Event{}, ev); d != "" {
					t.Errorf("refused progress made an event:\n%s", d)
				}
				return
			}
			want := before.Clone()
			want.Progress = progress
			want.Lease = &Lease{Worker: tc.worker, Until: Millis(tc.now.Add(time.Minute))}
			want.UpdatedAt = Millis(tc.now)
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("task (-want +got):\n%s", d)
			}
			wantEv := Event{Kind: EventProgress, At: tc.now, Worker: tc.worker, Task: want}
			if d := cmp.Diff(wantEv, ev); d != "" {
				t.Errorf("event (-want +got):\n%s", d)
			}
		})
	}
}

func TestFinish(t *testing.T) {
	result := json.RawMessage(`{"url":"https://ex.com/a.jpg"}`)
	withProgress := func(tb testing.TB) Task {
		task, _, err := processingTask(tb).ReportProgress("box-1", json.RawMessage(`{"percent":40}`), time.Minute, at(12*time.Second))
		if err != nil {
			tb.Fatal(err)
		}
		return task
	}
	tests := []struct {
		name    string
		task    func(testing.TB) Task
		worker  string
		wantErr error
	}{
		{name: "lease holder", task: processingTask, worker: "box-1"},
		{name: "lease holder keeps the last progress", task: withProgress, worker: "box-1"},
		{name: "a worker not holding the lease", task: processingTask, worker: "box-2"},
		{name: "pending task, never claimed", task: pendingTask, worker: "box-1"},
		{name: "pending task after a re-queue", task: requeuedTask, worker: "box-1"},
		{name: "already finished: the first result wins", task: finishedTask, worker: "box-2", wantErr: ErrTerminal},
		{name: "already finished by the same worker", task: finishedTask, worker: "box-1", wantErr: ErrTerminal},
		{name: "timed out: the verdict is final", task: failedTask, worker: "box-1", wantErr: ErrTerminal},
	}
	now := at(30 * time.Minute)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.task(t)
			got, ev, err := before.Finish(tc.worker, result, now)
			checkErr(t, err, tc.wantErr)
			if tc.wantErr != nil {
				if d := cmp.Diff(before, got); d != "" {
					t.Errorf("refused result changed the task (-want +got):\n%s", d)
				}
				if d := cmp.Diff(Event{}, ev); d != "" {
					t.Errorf("refused result made an event:\n%s", d)
				}
				return
			}
			want := before.Clone()
			want.Status = Finished
			want.Result = result
			want.Lease = nil
			want.UpdatedAt = Millis(now)
			want.FinishedAt = ptr(Millis(now))
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("task (-want +got):\n%s", d)
			}
			wantEv := Event{Kind: EventResult, At: now, Worker: tc.worker, Task: want}
			if d := cmp.Diff(wantEv, ev); d != "" {
				t.Errorf("event (-want +got):\n%s", d)
			}
		})
	}
}

func TestRequeue(t *testing.T) {
	tests := []struct {
		name    string
		task    func(testing.TB) Task
		cause   string
		wantErr error
	}{
		{name: "lease lapsed: back to pending", task: processingTask, cause: CauseLease},
		{name: "socket closed: back to pending", task: processingTask, cause: CauseSocket},
		{name: "pending task", task: pendingTask, cause: CauseLease, wantErr: ErrNotProcessing},
		{name: "finished task", task: finishedTask, cause: CauseSocket, wantErr: ErrNotProcessing},
		{name: "failed task", task: failedTask, cause: CauseLease, wantErr: ErrNotProcessing},
	}
	now := at(2 * time.Minute)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.task(t)
			got, ev, err := before.Requeue(tc.cause, Retry{}, now)
			checkErr(t, err, tc.wantErr)
			if tc.wantErr != nil {
				if d := cmp.Diff(before, got); d != "" {
					t.Errorf("refused re-queue changed the task (-want +got):\n%s", d)
				}
				return
			}
			want := before.Clone()
			want.Status = Pending
			want.Lease = nil
			want.UpdatedAt = Millis(now)
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("task (-want +got):\n%s", d)
			}
			if got.Attempts != 1 {
				t.Errorf("attempts = %d, want 1 (a re-queue does not count; the next claim does)", got.Attempts)
			}
			// The event names the worker that lost the task.
			wantEv := Event{Kind: EventRequeue, At: now, Worker: "box-1", Task: want, Cause: tc.cause}
			if d := cmp.Diff(wantEv, ev); d != "" {
				t.Errorf("event (-want +got):\n%s", d)
			}
		})
	}
}

func TestTimeout(t *testing.T) {
	tests := []struct {
		name       string
		task       func(testing.TB) Task
		wantWorker string
		wantErr    error
	}{
		{name: "pending task", task: pendingTask, wantWorker: ""},
		{name: "processing task names the lease holder", task: processingTask, wantWorker: "box-1"},
		{name: "re-queued task", task: requeuedTask, wantWorker: ""},
		{name: "finished task", task: finishedTask, wantErr: ErrTerminal},
		{name: "failed task", task: failedTask, wantErr: ErrTerminal},
	}
	now := at(24*time.Hour + time.Millisecond)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.task(t)
			got, ev, err := before.Timeout(now)
			checkErr(t, err, tc.wantErr)
			if tc.wantErr != nil {
				if d := cmp.Diff(before, got); d != "" {
					t.Errorf("refused timeout changed the task (-want +got):\n%s", d)
				}
				return
			}
			want := before.Clone()
			want.Status = Failed
			want.Error = ptr(TimeoutError)
			want.Lease = nil
			want.UpdatedAt = Millis(now)
			want.FinishedAt = ptr(Millis(now))
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("task (-want +got):\n%s", d)
			}
			if *got.Error != "timeout" {
				t.Errorf("error = %q, want %q", *got.Error, "timeout")
			}
			wantEv := Event{Kind: EventTimeout, At: now, Worker: tc.wantWorker, Task: want}
			if d := cmp.Diff(wantEv, ev); d != "" {
				t.Errorf("event (-want +got):\n%s", d)
			}

			// A result after the timeout is refused, and changes nothing.
			after, _, err := got.Finish("box-1", json.RawMessage(`{}`), now.Add(time.Second))
			checkErr(t, err, ErrTerminal)
			if d := cmp.Diff(got, after); d != "" {
				t.Errorf("result after timeout changed the task (-want +got):\n%s", d)
			}
		})
	}
}

func TestFetch(t *testing.T) {
	tests := []struct {
		name   string
		task   func(testing.TB) Task
		wantOK bool
	}{
		{name: "finished, first read", task: finishedTask, wantOK: true},
		{name: "failed, first read", task: failedTask, wantOK: true},
		{name: "finished, second read", task: func(tb testing.TB) Task { return mustFetch(tb, finishedTask(tb), at(time.Hour)) }},
		{name: "pending", task: pendingTask},
		{name: "processing", task: processingTask},
	}
	now := at(30 * time.Hour)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.task(t)
			got, ev, ok := before.Fetch(now)
			if ok != tc.wantOK {
				t.Fatalf("Fetch ok = %v, want %v", ok, tc.wantOK)
			}
			if !tc.wantOK {
				if d := cmp.Diff(before, got); d != "" {
					t.Errorf("refused fetch changed the task (-want +got):\n%s", d)
				}
				if d := cmp.Diff(Event{}, ev); d != "" {
					t.Errorf("refused fetch made an event:\n%s", d)
				}
				return
			}
			want := before.Clone()
			want.FetchedAt = ptr(Millis(now))
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("task (-want +got):\n%s", d)
			}
			wantEv := Event{Kind: EventFetched, At: now, Task: want}
			if d := cmp.Diff(wantEv, ev); d != "" {
				t.Errorf("event (-want +got):\n%s", d)
			}
		})
	}
}

func TestClean(t *testing.T) {
	task := finishedTask(t)
	now := at(3 * time.Hour)
	got := task.Clean(now)
	want := Event{Kind: EventCleaned, At: now, Task: task}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("event (-want +got):\n%s", d)
	}
}

func TestDueAt(t *testing.T) {
	const lease = time.Minute
	queueTimeout := 24 * time.Hour
	retain := time.Hour
	finishedSettings := testSettings()
	fetchedSettings := testSettings()
	fetchedSettings.RetainFrom = RetainFromFetched

	claimedAt := at(time.Second) // processingTask: lease until t0+61s
	finishedAt := 10 * time.Second
	timedOutAt := 25 * time.Hour
	fetchedAtOffset := 2 * time.Hour

	fetched := func(tb testing.TB) Task { return mustFetch(tb, finishedTask(tb), at(fetchedAtOffset)) }
	progressed := func(tb testing.TB) Task {
		task, _, err := processingTask(tb).ReportProgress("box-1", json.RawMessage(`{}`), lease, at(50*time.Second))
		if err != nil {
			tb.Fatal(err)
		}
		return task // lease until t0+110s
	}

	tests := []struct {
		name     string
		task     func(testing.TB) Task
		settings Settings
		now      time.Time
		want     Due
	}{
		{name: "pending, fresh", task: pendingTask, settings: finishedSettings, now: at(time.Minute), want: DueNothing},
		{name: "pending, exactly queueSeconds old", task: pendingTask, settings: finishedSettings, now: at(queueTimeout), want: DueNothing},
		{name: "pending, 1 ms past queueSeconds", task: pendingTask, settings: finishedSettings, now: at(queueTimeout + time.Millisecond), want: DueTimeout},

		{name: "processing, within its lease", task: processingTask, settings: finishedSettings, now: at(30 * time.Second), want: DueNothing},
		{name: "processing, exactly at lease.until", task: processingTask, settings: finishedSettings, now: claimedAt.Add(lease), want: DueNothing},
		{name: "processing, 1 ms past lease.until", task: processingTask, settings: finishedSettings, now: claimedAt.Add(lease + time.Millisecond), want: DueRequeue},
		{name: "processing, progress extended the lease", task: progressed, settings: finishedSettings, now: claimedAt.Add(lease + time.Millisecond), want: DueNothing},
		{name: "processing, 1 ms past the extended lease", task: progressed, settings: finishedSettings, now: at(110*time.Second + time.Millisecond), want: DueRequeue},
		{name: "processing, exactly queueSeconds old and lease lapsed", task: processingTask, settings: finishedSettings, now: at(queueTimeout), want: DueRequeue},
		{name: "processing, timeout wins over lease lapse", task: processingTask, settings: finishedSettings, now: at(queueTimeout + time.Millisecond), want: DueTimeout},

		{name: "finished, retain from finished, exactly at the end", task: finishedTask, settings: finishedSettings, now: at(finishedAt + retain), want: DueNothing},
		{name: "finished, retain from finished, 1 ms past", task: finishedTask, settings: finishedSettings, now: at(finishedAt + retain + time.Millisecond), want: DueClean},
		{name: "finished, retain from finished, a fetch does not move the clock", task: fetched, settings: finishedSettings, now: at(finishedAt + retain + time.Millisecond), want: DueClean},
		{name: "finished, older than queueSeconds is not a timeout", task: finishedTask, settings: fetchedSettings, now: at(queueTimeout + time.Hour), want: DueNothing},
		{name: "failed by timeout, retention from finishedAt", task: failedTask, settings: finishedSettings, now: at(timedOutAt + retain + time.Millisecond), want: DueClean},
		{name: "failed by timeout, exactly at the end of retention", task: failedTask, settings: finishedSettings, now: at(timedOutAt + retain), want: DueNothing},

		{name: "retain from fetched, never fetched, a year later", task: finishedTask, settings: fetchedSettings, now: at(365 * 24 * time.Hour), want: DueNothing},
		{name: "retain from fetched, failed never fetched, a year later", task: failedTask, settings: fetchedSettings, now: at(365 * 24 * time.Hour), want: DueNothing},
		{name: "retain from fetched, past finishedAt+retain but fetched later", task: fetched, settings: fetchedSettings, now: at(finishedAt + retain + time.Millisecond), want: DueNothing},
		{name: "retain from fetched, exactly at fetchedAt+retain", task: fetched, settings: fetchedSettings, now: at(fetchedAtOffset + retain), want: DueNothing},
		{name: "retain from fetched, 1 ms past fetchedAt+retain", task: fetched, settings: fetchedSettings, now: at(fetchedAtOffset + retain + time.Millisecond), want: DueClean},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			task := tc.task(t)
			got := DueAt(task, tc.settings, tc.now)
			if got != tc.want {
				t.Errorf("DueAt = %v, want %v", got, tc.want)
			}
			// The sweep stops at the first task TooYoungToClean: it must
			// never say so of a task that is due.
			if got == DueClean && TooYoungToClean(task.PostedAt, tc.settings, tc.now) {
				t.Error("TooYoungToClean holds of a task due for cleaning")
			}
		})
	}
}

func TestTooYoungToClean(t *testing.T) {
	s := testSettings() // retainSeconds: an hour
	posted := Millis(at(0))
	if !TooYoungToClean(posted, s, at(time.Hour)) {
		t.Error("a task posted exactly retainSeconds ago can be due")
	}
	if TooYoungToClean(posted, s, at(time.Hour+time.Millisecond)) {
		t.Error("a task posted retainSeconds and 1 ms ago is called too young")
	}
}

func TestRetentionStart(t *testing.T) {
	fin, fet := testSettings(), testSettings()
	fet.RetainFrom = RetainFromFetched
	fetched := func(tb testing.TB) Task { return mustFetch(tb, finishedTask(tb), at(time.Hour)) }
	tests := []struct {
		name     string
		task     func(testing.TB) Task
		settings Settings
		want     *int64
	}{
		{name: "pending", task: pendingTask, settings: fin, want: nil},
		{name: "processing", task: processingTask, settings: fin, want: nil},
		{name: "finished, from finished", task: finishedTask, settings: fin, want: ptr(ms(10 * time.Second))},
		{name: "failed, from finished", task: failedTask, settings: fin, want: ptr(ms(25 * time.Hour))},
		{name: "finished, from fetched, unread", task: finishedTask, settings: fet, want: nil},
		{name: "finished, from fetched, read", task: fetched, settings: fet, want: ptr(ms(time.Hour))},
		{name: "finished and read, from finished", task: fetched, settings: fin, want: ptr(ms(10 * time.Second))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := RetentionStart(tc.task(t), tc.settings)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("RetentionStart (-want +got):\n%s", d)
			}
		})
	}
}

// sweep applies what DueAt says, as the sweep does, and returns the task
// after (ok false when it was cleaned) and the event, if any.
func sweep(tb testing.TB, task Task, s Settings, now time.Time) (Task, *Event, bool) {
	tb.Helper()
	var (
		ev  Event
		err error
	)
	switch DueAt(task, s, now) {
	case DueNothing:
		return task, nil, true
	case DueTimeout:
		task, ev, err = task.Timeout(now)
	case DueRequeue:
		task, ev, err = task.Requeue(CauseLease, Retry{}, now)
	case DueClean:
		ev = task.Clean(now)
		return Task{}, &ev, false
	}
	if err != nil {
		tb.Fatalf("sweep at %v: %v", now, err)
	}
	return task, &ev, true
}

// The seed's "Late but useful results": worker A claims, its lease lapses,
// the sweep re-queues, worker B claims, A's late result is still accepted,
// then B's result is refused.
func TestLateResultAfterRequeue(t *testing.T) {
	s := testSettings()
	task := mustPost(t)

	task = mustClaim(t, task, "box-a", at(time.Second)) // lease until +61 s
	if got := DueAt(task, s, at(61*time.Second)); got != DueNothing {
		t.Fatalf("DueAt at lease.until = %v, want DueNothing", got)
	}
	task, ev, _ := sweep(t, task, s, at(61*time.Second+time.Millisecond))
	if ev == nil || ev.Kind != EventRequeue || ev.Worker != "box-a" || ev.Cause != CauseLease {
		t.Fatalf("sweep after the lease lapsed: event %+v, want a lease requeue naming box-a", ev)
	}
	if task.Status != Pending || task.Lease != nil || task.Attempts != 1 {
		t.Fatalf("after re-queue: status %s, lease %v, attempts %d; want pending, nil, 1", task.Status, task.Lease, task.Attempts)
	}

	task = mustClaim(t, task, "box-b", at(70*time.Second))
	if task.Attempts != 2 || task.Lease.Worker != "box-b" {
		t.Fatalf("after B's claim: attempts %d, lease %+v; want 2, box-b", task.Attempts, task.Lease)
	}

	// A no longer holds the lease: its progress is refused...
	if _, _, err := task.ReportProgress("box-a", json.RawMessage(`{}`), time.Minute, at(71*time.Second)); err != ErrNotLeaseHolder {
		t.Fatalf("A's progress: err = %v, want ErrNotLeaseHolder", err)
	}
	// ...but its result is not: nobody finished first.
	task, ev2, err := task.Finish("box-a", json.RawMessage(`{"by":"a"}`), at(72*time.Second))
	if err != nil {
		t.Fatalf("A's late result: %v, want accepted", err)
	}
	want := Task{
		ID: testID, Host: testHost, Queue: testQueue, Status: Finished, Item: testItem,
		PostedBy: ptr("alice"), PostedAt: ms(0), UpdatedAt: ms(72 * time.Second),
		Attempts: 2, Result: json.RawMessage(`{"by":"a"}`), FinishedAt: ptr(ms(72 * time.Second)),
	}
	if d := cmp.Diff(want, task); d != "" {
		t.Fatalf("after A's result (-want +got):\n%s", d)
	}
	if d := cmp.Diff(Event{Kind: EventResult, At: at(72 * time.Second), Worker: "box-a", Task: want}, ev2); d != "" {
		t.Errorf("A's result event (-want +got):\n%s", d)
	}

	// B, the lease holder until a moment ago, loses: accepted false.
	after, _, err := task.Finish("box-b", json.RawMessage(`{"by":"b"}`), at(73*time.Second))
	checkErr(t, err, ErrTerminal)
	if d := cmp.Diff(want, after); d != "" {
		t.Errorf("B's refused result changed the task (-want +got):\n%s", d)
	}
	if _, _, err := task.ReportProgress("box-b", json.RawMessage(`{}`), time.Minute, at(73*time.Second)); err != ErrNotProcessing {
		t.Errorf("B's progress after the finish: err = %v, want ErrNotProcessing", err)
	}
}

// The seed's queue timeout is the terminal backstop: when both the queue
// timeout and the lease lapse are due, the task fails rather than being
// pointlessly re-queued, and no result is taken after that.
func TestQueueTimeoutWinsOverLeaseLapse(t *testing.T) {
	s := testSettings()
	s.QueueSeconds = 120
	task := mustPost(t)
	task = mustClaim(t, task, "box-1", at(100*time.Second)) // lease until +160 s

	now := at(200 * time.Second) // 80 s into the queue timeout, 40 s past the lease
	if got := DueAt(task, s, now); got != DueTimeout {
		t.Fatalf("DueAt = %v, want DueTimeout", got)
	}
	got, ev, ok := sweep(t, task, s, now)
	if !ok {
		t.Fatal("sweep cleaned a processing task")
	}
	want := task.Clone()
	want.Status = Failed
	want.Error = ptr("timeout")
	want.Lease = nil
	want.UpdatedAt = Millis(now)
	want.FinishedAt = ptr(Millis(now))
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("after the sweep (-want +got):\n%s", d)
	}
	if d := cmp.Diff(&Event{Kind: EventTimeout, At: now, Worker: "box-1", Task: want}, ev); d != "" {
		t.Errorf("event (-want +got):\n%s", d)
	}

	if _, _, err := got.Finish("box-1", json.RawMessage(`{}`), now.Add(time.Millisecond)); err != ErrTerminal {
		t.Errorf("result after timeout: err = %v, want ErrTerminal", err)
	}
	if d := DueAt(got, s, now.Add(time.Hour)); d != DueNothing {
		t.Errorf("DueAt an hour after the timeout = %v, want DueNothing", d)
	}
	if d := DueAt(got, s, now.Add(time.Hour+time.Millisecond)); d != DueClean {
		t.Errorf("DueAt an hour and 1 ms after the timeout = %v, want DueClean", d)
	}
}

// Under retainFrom "fetched" the countdown starts at the first read only.
func TestRetentionFromFetched(t *testing.T) {
	s := testSettings()
	s.RetainFrom = RetainFromFetched
	task := finishedTask(t)

	for _, d := range []time.Duration{time.Hour, 48 * time.Hour, 10 * 365 * 24 * time.Hour} {
		if got := DueAt(task, s, at(d)); got != DueNothing {
			t.Fatalf("unread task at +%v: DueAt = %v, want DueNothing", d, got)
		}
	}

	readAt := at(30 * 24 * time.Hour)
	task, ev, ok := task.Fetch(readAt)
	if !ok || ev.Kind != EventFetched {
		t.Fatalf("first Fetch: ok %v, event %v; want true, fetched", ok, ev.Kind)
	}
	if _, _, again := task.Fetch(readAt.Add(time.Minute)); again {
		t.Fatal("second Fetch reported true")
	}
	if got := DueAt(task, s, readAt.Add(time.Hour)); got != DueNothing {
		t.Errorf("an hour after the read: DueAt = %v, want DueNothing", got)
	}
	_, cleaned, ok := sweep(t, task, s, readAt.Add(time.Hour+time.Millisecond))
	if ok || cleaned == nil || cleaned.Kind != EventCleaned || cleaned.Task.ID != testID {
		t.Errorf("an hour and 1 ms after the read: ok %v, event %+v; want the task cleaned", ok, cleaned)
	}
}

// A task is never finished twice, whatever order the moves come in.
func TestNeverFinishedTwice(t *testing.T) {
	moves := []struct {
		name string
		do   func(Task, time.Time) (Task, error)
	}{
		{"finish a", func(t Task, now time.Time) (Task, error) {
			t, _, err := t.Finish("a", json.RawMessage(`"a"`), now)
			return t, err
		}},
		{"finish b", func(t Task, now time.Time) (Task, error) {
			t, _, err := t.Finish("b", json.RawMessage(`"b"`), now)
			return t, err
		}},
		{"claim a", func(t Task, now time.Time) (Task, error) {
			t, _, err := t.Claim("a", time.Minute, now)
			return t, err
		}},
		{"claim b", func(t Task, now time.Time) (Task, error) {
			t, _, err := t.Claim("b", time.Minute, now)
			return t, err
		}},
		{"requeue", func(t Task, now time.Time) (Task, error) {
			t, _, err := t.Requeue(CauseSocket, Retry{}, now)
			return t, err
		}},
		{"timeout", func(t Task, now time.Time) (Task, error) {
			t, _, err := t.Timeout(now)
			return t, err
		}},
	}
	// Every sequence of four moves: at most one of them makes the task
	// terminal, and once terminal nothing changes it.
	var walk func(task Task, depth int, path string, now time.Time)
	walk = func(task Task, depth int, path string, now time.Time) {
		if depth == 4 {
			return
		}
		for _, m := range moves {
			next, err := m.do(task, now)
			p := path + " > " + m.name
			if task.Status.Terminal() {
				if err == nil {
					t.Fatalf("%s: a terminal task accepted a move", p)
				}
				if d := cmp.Diff(task, next); d != "" {
					t.Fatalf("%s: a terminal task changed (-want +got):\n%s", p, d)
				}
				continue
			}
			if err == nil && next.Status.Terminal() && next.FinishedAt == nil {
				t.Fatalf("%s: terminal without finishedAt", p)
			}
			walk(next, depth+1, p, now.Add(time.Second))
		}
	}
	walk(mustPost(t), 0, "post", at(time.Second))
}
