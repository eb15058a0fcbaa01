package postgres

import (
	"bytes"
	"sync"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/taskhoster/taskhoster/adapters/eventlog"
	"github.com/taskhoster/taskhoster/domain"
)

// A batch's writes as arrays (group.go): its posts in one INSERT, its
// updates in one UPDATE with their event lines, each reading its rows from
// unnest of one array per column. One statement per batch instead of two
// or three per change: the database parses, plans and runs each statement
// once for the lot, which is most of what a small change costs it.

// tasksColumns are the values of tasks' columns, one array each, in the
// order of columns.
type tasksColumns struct {
	hosts, queues, ids, statuses texts
	stages                       int2s
	priorities, eligible         int8s
	notBefore                    int8s
	posted                       int8s
	keys                         texts
	records                      byteas
}

func (c *tasksColumns) add(t domain.Task, data []byte) {
	c.hosts.add(t.Host)
	c.queues.add(t.Queue)
	c.ids.add(t.ID)
	c.statuses.add(string(t.Status))
	c.stages.add(int16(t.Status.Stage()))
	c.priorities.add(int64(t.Priority))
	c.eligible.add(t.EligibleAt())
	c.notBefore.addOrNull(t.NotBefore)
	c.posted.add(t.PostedAt)
	if t.IdempotencyKey != "" {
		c.keys.add(t.IdempotencyKey)
	} else {
		c.keys.null()
	}
	c.records.add(data)
}

func (c *tasksColumns) len() int { return c.ids.n }

func (c *tasksColumns) args() []any {
	return []any{&c.hosts, &c.queues, &c.ids, &c.statuses, &c.stages, &c.priorities, &c.eligible, &c.notBefore, &c.posted, &c.keys, &c.records}
}

func (c *tasksColumns) reset() {
	for _, a := range c.args() {
		a.(arrayValue).inner().reset()
	}
}

// unnestTasks reads the arrays of tasksColumns.args as rows v.
const unnestTasks = `unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int2[], $6::int8[], $7::int8[], $8::int8[], $9::int8[], $10::text[], $11::bytea[])`

// lineColumns are event lines, one array per column of event_lines.
type lineColumns struct {
	days, hosts, queues, ids texts
	lines                    byteas
}

func (l *lineColumns) add(ev domain.Event, archived []string) {
	t := ev.Task
	l.days.add(eventlog.DayOf(ev.At))
	l.hosts.add(t.Host)
	l.queues.add(t.Queue)
	l.ids.add(t.ID)
	l.lines.addAppended(func(b []byte) []byte { return eventlog.AppendLine(b, ev, archived) })
}

func (l *lineColumns) args() []any { return []any{&l.days, &l.hosts, &l.queues, &l.ids, &l.lines} }

func (l *lineColumns) reset() {
	for _, a := range l.args() {
		a.(arrayValue).inner().reset()
	}
}

// writes are a batch's posts and changes. Their arrays' buffers are kept
// from one batch to the next (writesPool), so that a busy server writes
// its batches into buffers already grown to fit them.
type writes struct {
	posts   postRows
	changes changeRows
}

var writesPool = sync.Pool{New: func() any { return new(writes) }}

func getWrites() *writes { return writesPool.Get().(*writes) }

// release empties w, keeping its buffers, and gives it back. The batch it
// was queued in must have run.
func (w *writes) release() {
	p, c := &w.posts, &w.changes
	p.tasks.reset()
	p.items.reset()
	p.unsure.reset()
	p.lines.reset()
	clear(p.ops)
	p.ops, p.created = p.ops[:0], nil
	c.tasks.reset()
	c.lines.reset()
	c.guards.reset()
	c.guessed, c.updated = false, nil
	writesPool.Put(w)
}

// postRows are a batch's posts.
type postRows struct {
	tasks   tasksColumns
	items   texts
	unsure  bools
	lines   lineColumns
	ops     []*op
	created map[domain.Key]bool // filled once the statement ran
}

func (c *postRows) add(o *op) { c.addAs(o, o.task, o.data) }

// addAs adds o's post as the record t, stored as data: o's task, or
// what the claim that rides it made of it (group.go, rideBehind).
func (c *postRows) addAs(o *op, t domain.Task, data []byte) {
	c.tasks.add(t, data)
	item, unsure := itemArg(t)
	c.items.addOrNull(item)
	c.unsure.add(unsure)
	c.ops = append(c.ops, o)
}

// queue queues the INSERT of every post and of their lines, each line
// only with its task: a post whose id or idempotency key is taken inserts
// nothing (the caller then runs it alone, which says which).
func (c *postRows) queue(b *pgx.Batch) {
	if len(c.ops) == 0 {
		return
	}
	c.created = make(map[domain.Key]bool, len(c.ops))
	args := append(c.tasks.args(), &c.items, &c.unsure)
	args = append(args, c.lines.args()...)
	b.Queue(`WITH ins AS (
			INSERT INTO tasks (`+columns+`, item)
			SELECT v.host, v.queue, v.id, v.status, v.stage, v.priority, v.eligible_at, v.not_before, v.posted_at, v.idempotency_key, v.record, `+itemSQL("v.item", "v.unsure", "v.record")+`
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int2[], $6::int8[], $7::int8[], $8::int8[], $9::int8[], $10::text[], $11::bytea[],
				$12::text[], $13::bool[]) AS v(host, queue, id, status, stage, priority, eligible_at, not_before, posted_at, idempotency_key, record, item, unsure)
			ON CONFLICT DO NOTHING
			RETURNING host, queue, id),
		lines AS (
			`+insertLineSQL+`
			SELECT l.day, l.host, l.queue, l.id, l.line
			FROM unnest($14::text[], $15::text[], $16::text[], $17::text[], $18::bytea[]) AS l(day, host, queue, id, line)
			WHERE (l.host, l.queue, l.id) IN (SELECT host, queue, id FROM ins))
		SELECT host, queue, id FROM ins`, args...).Query(keysInto(c.created))
}

// keysInto reads rows of (host, queue, id) into set.
func keysInto(set map[domain.Key]bool) func(pgx.Rows) error {
	return func(r pgx.Rows) error {
		for r.Next() {
			var k domain.Key
			if err := r.Scan(&k.Host, &k.Queue, &k.ID); err != nil {
				return err
			}
			set[k] = true
		}
		return r.Err()
	}
}

// changeRows are a batch's changes of rows, with their lines: of rows it
// holds, and guessed ones (guess.go), each guarded by the record it was
// decided on.
type changeRows struct {
	tasks   tasksColumns
	lines   lineColumns
	guards  byteas              // NULL: a row the batch holds
	guessed bool                // some change is guarded
	updated map[domain.Key]bool // with guesses: the rows changed, once the statement ran
}

func (u *changeRows) add(t domain.Task, data, guard []byte) {
	u.tasks.add(t, data)
	u.guards.add(guard)
	u.guessed = u.guessed || guard != nil
}

// queue queues the UPDATE of every row and the INSERT of the lines, as one
// statement. With guesses, a row changes only where its record is the
// guard (the one the change was decided on: PostgreSQL checks it again on
// the row's latest version once it has the row's lock), a line goes in
// only with its row, and the statement returns the rows it changed.
func (u *changeRows) queue(b *pgx.Batch) {
	if u.tasks.len() == 0 {
		return
	}
	args := append(u.tasks.args(), u.lines.args()...)
	if !u.guessed {
		b.Queue(updateRowsSQL, args...)
		return
	}
	u.updated = make(map[domain.Key]bool, u.tasks.len())
	b.Queue(guardedUpdateRowsSQL, append(args, &u.guards)...).Query(keysInto(u.updated))
}

// updateRowsSQL writes the rows of tasksColumns ($1 to $11) and inserts
// the lines of lineColumns ($12 to $16).
const updateRowsSQL = `WITH upd AS (
		` + setRowsSQL + `
		FROM ` + unnestTasks + ` AS v(host, queue, id, status, stage, priority, eligible_at, not_before, posted_at, idempotency_key, record)
		WHERE t.host = v.host AND t.queue = v.queue AND t.id = v.id)
	` + insertLineSQL + ` SELECT * FROM unnest($12::text[], $13::text[], $14::text[], $15::text[], $16::bytea[])`

// guardedUpdateRowsSQL is updateRowsSQL with a guard per row ($17, NULL:
// none): a guarded row is written only where its record is the guard, a
// line only with its row, and it returns the rows written.
const guardedUpdateRowsSQL = `WITH upd AS (
		` + setRowsSQL + `
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int2[], $6::int8[], $7::int8[], $8::int8[], $9::int8[], $10::text[], $11::bytea[], $17::bytea[])
			AS v(host, queue, id, status, stage, priority, eligible_at, not_before, posted_at, idempotency_key, record, guard)
		WHERE t.host = v.host AND t.queue = v.queue AND t.id = v.id AND (v.guard IS NULL OR t.record = v.guard)
		RETURNING t.host, t.queue, t.id),
	lines AS (
		` + insertLineSQL + `
		SELECT l.day, l.host, l.queue, l.id, l.line
		FROM unnest($12::text[], $13::text[], $14::text[], $15::text[], $16::bytea[]) AS l(day, host, queue, id, line)
		WHERE (l.host, l.queue, l.id) IN (SELECT host, queue, id FROM upd))
	SELECT host, queue, id FROM upd`

const setRowsSQL = `UPDATE tasks t SET status = v.status, stage = v.stage, priority = v.priority, eligible_at = v.eligible_at,
		not_before = v.not_before, posted_at = v.posted_at, idempotency_key = v.idempotency_key, record = v.record`

// itemSQL is the value of the column item for a row whose item is the
// text item (NULL: none) and whose record is record: the text as jsonb,
// or, when unsure, what taskhoster_item makes of the record (NULL where
// jsonb cannot hold the item, rather than failing the statement).
func itemSQL(item, unsure, record string) string {
	return `CASE WHEN ` + unsure + ` THEN taskhoster_item(` + record + `) ELSE ` + item + `::jsonb END`
}

// itemArg is t's item for the column item (migration 4): its JSON text,
// which the database takes as jsonb, or nil when the task has none (or
// null). unsure: the text may hold what jsonb refuses, and the database
// is to judge it with taskhoster_item instead (as the trigger did before
// migration 5), which catches the refusal. Most items are plain and skip
// that function, whose exception block costs a subtransaction per row.
// What jsonb refuses: a \u0000 or a lone surrogate (any \u escape is sent
// to the function), a number beyond numeric's range (any exponent or long
// run of digits is), nesting beyond the parser's stack (deep nesting is),
// and text that is not UTF-8.
func itemArg(t domain.Task) (text *string, unsure bool) {
	if domain.IsNull(t.Item) {
		return nil, false
	}
	if !plainJSON(t.Item) {
		return nil, true
	}
	s := string(t.Item)
	return &s, false
}

// plainJSON reports whether the JSON text b surely reads as jsonb (see
// itemArg); false when unsure.
func plainJSON(b []byte) bool {
	const (
		maxDepth  = 64
		maxDigits = 100
	)
	if !utf8.Valid(b) || bytes.Contains(b, []byte(`\u`)) {
		return false
	}
	depth, digits := 0, 0
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > maxDepth {
				return false
			}
		case c == ']' || c == '}':
			depth--
		case c == 'e' || c == 'E':
			if digits > 0 {
				return false // an exponent
			}
		}
		if c >= '0' && c <= '9' {
			if digits++; digits > maxDigits {
				return false
			}
		} else if c != '.' {
			digits = 0
		}
	}
	return true
}
