package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/internal/pgtest"
	"github.com/taskhoster/taskhoster/tests/contract"
)

// A small grammar of claim queries and items over few names and values, so
// that random queries often accept some random items and reject others,
// and every tricky value (1 and 1.0, "é", null, nesting) meets every
// keyword.

var (
	grammarNames  = []string{"a", "b", "k"}
	grammarValues = []string{`0`, `1`, `1.0`, `1e0`, `-1`, `2.5`, `100`, `"x"`, `"y"`, `"é"`, `"1"`, `""`, `null`, `true`, `false`, `[]`, `[1]`, `["x",1]`, `{}`, `{"a":1}`}
	grammarTypes  = []string{"object", "array", "string", "number", "integer", "boolean", "null"}
)

// RandomItem is a random item: mostly an object, of depth at most depth.
func RandomItem(rng *rand.Rand, depth int) string {
	if depth > 0 && rng.IntN(4) != 0 {
		var members []string
		for _, n := range grammarNames {
			if rng.IntN(2) == 0 {
				members = append(members, fmt.Sprintf("%q:%s", n, RandomItem(rng, depth-1)))
			}
		}
		return "{" + strings.Join(members, ",") + "}"
	}
	return grammarValues[rng.IntN(len(grammarValues))]
}

// RandomQuery is a random claim query of depth at most depth.
func RandomQuery(rng *rand.Rand, depth int) string {
	if depth == 0 || rng.IntN(8) == 0 {
		return []string{`true`, `false`, `{}`}[rng.IntN(3)]
	}
	var kw []string
	for range 1 + rng.IntN(3) {
		kw = append(kw, randomKeyword(rng, depth))
	}
	// A keyword drawn twice: the decoder keeps the last, as the schema
	// library's does.
	return "{" + strings.Join(kw, ",") + "}"
}

func randomKeyword(rng *rand.Rand, depth int) string {
	value := func() string { return grammarValues[rng.IntN(len(grammarValues))] }
	number := func() string { return []string{`0`, `1`, `1.0`, `2.5`, `-1`, `100`, `1e300`}[rng.IntN(7)] }
	sub := func() string { return RandomQuery(rng, depth-1) }
	subs := func() string {
		var list []string
		for range 1 + rng.IntN(3) {
			list = append(list, sub())
		}
		return "[" + strings.Join(list, ",") + "]"
	}
	switch rng.IntN(16) {
	case 0, 1, 2:
		var props []string
		for _, n := range grammarNames {
			if rng.IntN(2) == 0 {
				props = append(props, fmt.Sprintf("%q:%s", n, sub()))
			}
		}
		return `"properties":{` + strings.Join(props, ",") + `}`
	case 3, 4:
		var req []string
		for _, n := range grammarNames {
			if rng.IntN(2) == 0 {
				req = append(req, fmt.Sprintf("%q", n))
			}
		}
		return `"required":[` + strings.Join(req, ",") + `]`
	case 5:
		if rng.IntN(2) == 0 {
			return fmt.Sprintf(`"type":%q`, grammarTypes[rng.IntN(len(grammarTypes))])
		}
		return fmt.Sprintf(`"type":[%q,%q]`, grammarTypes[rng.IntN(len(grammarTypes))], grammarTypes[rng.IntN(len(grammarTypes))])
	case 6:
		return `"type":"object"`
	case 7, 8:
		return `"const":` + value()
	case 9:
		return `"enum":[` + value() + `,` + value() + `]`
	case 10:
		return fmt.Sprintf(`%q:%s`, []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}[rng.IntN(4)], number())
	case 11:
		return `"allOf":` + subs()
	case 12:
		return `"anyOf":` + subs()
	case 13:
		return `"oneOf":` + subs()
	case 14:
		return `"not":` + sub()
	default:
		return []string{`"minLength":1`, `"pattern":"^x"`, `"additionalProperties":false`, `"multipleOf":2`, `"title":"t"`}[rng.IntN(5)]
	}
}

// probe is a table of items as the tasks table keeps them, to run a
// filter's condition over.
type probe struct {
	s     *Store
	items []string
	null  map[int]bool // items jsonb cannot hold
}

func newProbe(tb testing.TB, items []string) *probe {
	tb.Helper()
	s, err := Open(context.Background(), pgtest.Database(tb))
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	tb.Cleanup(s.Close)
	ctx := context.Background()
	if _, err := s.pool.Exec(ctx, `CREATE TABLE probe (n int PRIMARY KEY, item jsonb)`); err != nil {
		tb.Fatal(err)
	}
	p := &probe{s: s, items: items, null: map[int]bool{}}
	for n, item := range items {
		t, _ := domain.Post(fmt.Sprintf("%016x", n), "task.example.com", "q", json.RawMessage(item), "alice", epoch)
		// The item as a post writes it (insertTask).
		text, unsure := itemArg(t)
		var isNull bool
		if err := s.pool.QueryRow(ctx, `INSERT INTO probe VALUES ($1, `+itemSQL("$3::text", "$4::bool", "$2")+`) RETURNING item IS NULL`,
			n, domain.EncodeTask(t), text, unsure).Scan(&isNull); err != nil {
			tb.Fatalf("item %s: %v", item, err)
		}
		p.null[n] = isNull
	}
	return p
}

// check runs query's filter over the items and compares it with the schema
// library's verdicts: the filter lets through every item the query
// accepts, and, when exact, only those (of the items jsonb holds).
func (p *probe) check(tb testing.TB, query string) {
	tb.Helper()
	s, err := schema.Compile(json.RawMessage(query))
	if err != nil {
		return // not a query a worker can send
	}
	f := translate(json.RawMessage(query))
	if f == nil {
		return
	}
	// One round trip: each query is run once.
	rows, err := p.s.pool.Query(context.Background(), `SELECT n FROM probe WHERE `+f.where, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		tb.Fatalf("query %s: filter %s: %v", query, f.where, err)
	}
	through := map[int]bool{}
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			tb.Fatal(err)
		}
		through[n] = true
	}
	if err := rows.Err(); err != nil {
		tb.Fatalf("query %s: filter %s: %v", query, f.where, err)
	}
	for n, item := range p.items {
		accepts := len(s.Validate(json.RawMessage(item))) == 0
		switch {
		case accepts && !through[n]:
			tb.Errorf("query %s accepts %s, but its filter rejects it:\n%s", query, item, f.where)
		case !accepts && through[n] && f.exact && !p.null[n]:
			tb.Errorf("query %s rejects %s, but its exact filter lets it through:\n%s", query, item, f.where)
		}
	}
}

var epoch = time.UnixMilli(1751500000000).UTC()

func probeItems() []string {
	rng := rand.New(rand.NewPCG(14, 1))
	items := append(append([]string{}, contract.QueryItems...), contract.DiffItems...)
	for range 150 {
		items = append(items, RandomItem(rng, 3))
	}
	return items
}

// A post writes the item column as taskhoster_item reads it from the
// record (the trigger before migration 5 did that): jsonb for what jsonb
// holds, NULL for the rest, never a refused statement.
func TestItemColumnAsTheFunctionReadsIt(t *testing.T) {
	s, err := Open(context.Background(), pgtest.Database(t))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer s.Close()
	deep := strings.Repeat("[", 100) + strings.Repeat("]", 100)
	items := append(probeItems(), `null`, `"x"`, `12345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890`,
		`{"a":"\\u0000 is no escape"}`, `{"a":"\u00e9"}`, `[1.5e-300000]`, deep, `{"e":"1e5","n":-0.5}`, `{"a":"]]]]"}`)
	for n, item := range items {
		task, _ := domain.Post(fmt.Sprintf("%016x", n), "task.example.com", "q", json.RawMessage(item), "alice", epoch)
		stored, data, err := checkNew(task)
		if err != nil {
			continue // not an item a post can hold
		}
		text, unsure := itemArg(stored)
		var same bool
		var written, read *string
		if err := s.pool.QueryRow(context.Background(), `SELECT w IS NOT DISTINCT FROM r, w::text, r::text
			FROM (SELECT `+itemSQL("$2::text", "$3::bool", "$1")+` AS w, taskhoster_item($1) AS r) x`,
			data, text, unsure).Scan(&same, &written, &read); err != nil {
			t.Fatalf("item %s: %v", item, err)
		}
		if !same {
			t.Errorf("item %s: written %v, the function reads %v", item, deref(written), deref(read))
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}

// Every contract query, and many random ones, against items as the tasks
// table holds them.
func TestFilterAgainstSchema(t *testing.T) {
	p := newProbe(t, probeItems())
	for _, q := range append(append([]string{}, contract.QuerySchemas...), contract.DiffQueries...) {
		p.check(t, q)
	}
	rng := rand.New(rand.NewPCG(14, 2))
	for range 300 {
		p.check(t, RandomQuery(rng, 3))
	}
}

// FuzzFilter checks a query's filter against the schema library's verdicts
// on a fixed set of items; `go test` runs its seed corpus.
func FuzzFilter(f *testing.F) {
	for _, q := range append(append([]string{}, contract.QuerySchemas...), contract.DiffQueries...) {
		f.Add(q)
	}
	rng := rand.New(rand.NewPCG(14, 3))
	for range 50 {
		f.Add(RandomQuery(rng, 3))
	}
	p := newProbe(f, probeItems())
	f.Fuzz(func(t *testing.T, query string) {
		p.check(t, query)
	})
}

// A translation never fails on a schema, whatever it holds, and always
// quotes what it copies into SQL.
func TestTranslateQuotes(t *testing.T) {
	for _, q := range []string{
		`{"properties":{"a'); DROP TABLE tasks; --":{"const":"x"}},"required":["a'); DROP TABLE tasks; --"]}`,
		`{"properties":{"\\'":{"const":"\\'"}},"required":["\\'"]}`,
		`{"properties":{"$1":{"const":"$1"}},"required":["$1"]}`,
	} {
		f := translate(json.RawMessage(q))
		if f == nil || !f.exact {
			t.Fatalf("query %s: filter %+v, want an exact one", q, f)
		}
	}
	p := newProbe(t, []string{
		`{"a'); DROP TABLE tasks; --":"x"}`, `{"\\'":"\\'"}`, `{"$1":"$1"}`, `{"a":"x"}`,
	})
	p.check(t, `{"properties":{"a'); DROP TABLE tasks; --":{"const":"x"}},"required":["a'); DROP TABLE tasks; --"]}`)
	p.check(t, `{"properties":{"\\'":{"const":"\\'"}},"required":["\\'"]}`)
	p.check(t, `{"properties":{"$1":{"const":"$1"}},"required":["$1"]}`)
}

// The pool's sessions plan each prepared statement once
// (plan_cache_mode=force_generic_plan, store.go), and the plans kept find
// their rows by index: the batch statements look up their keys in the
// primary key even when planned on an empty table (the plan is kept as the
// table grows), a query-less claim walks the claim order (tasks_claim), a
// claim query on a rare const member reads the item index (tasks_item) and
// one that matches most items the claim order, reading on from a position
// or not, as does a claims batch's count of the rows beyond its own; and
// what only a scan can run is not JIT-compiled.
func TestPlansAreGenericAndUseTheirIndexes(t *testing.T) {
	s, err := Open(context.Background(), pgtest.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for name, want := range sessionSettings {
		var got string
		if err := conn.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&got); err != nil || got != want {
			t.Fatalf("%s = %q (%v), want %q", name, got, err, want)
		}
	}
	prepared := 0
	// explain prepares query (with plan_cache_mode force_generic_plan,
	// planned at its first execution and kept), explains its execution
	// with args and checks the plan is generic and reads index.
	explain := func(query, args, index string) {
		t.Helper()
		prepared++
		name := fmt.Sprintf("p%d", prepared)
		if _, err := conn.Exec(ctx, `PREPARE `+name+` AS `+query); err != nil {
			t.Fatalf("prepare %s: %v", query, err)
		}
		rows, err := conn.Query(ctx, `EXPLAIN EXECUTE `+name+args, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatalf("explain %s: %v", query, err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		text := strings.Join(plan, "\n")
		var generic, custom int64
		if err := conn.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = $1`, name).Scan(&generic, &custom); err != nil {
			t.Fatal(err)
		}
		if generic != 1 || custom != 0 {
			t.Errorf("%s: %d generic plans and %d custom, want the generic one only", query, generic, custom)
		}
		if !strings.Contains(text, " "+index+" ") || strings.Contains(text, "Seq Scan on tasks") || strings.Contains(text, "Hash Join") {
			t.Errorf("%s: want a plan that reads %s, and no scan of tasks:\n%s", query, index, text)
		}
	}
	keys := `('{h,h,h}', '{q,q,q}', '{a,b,c}')`
	cols := `('{h,h}', '{q,q}', '{a,b}', '{finished,finished}', '{2,2}', '{0,0}', '{1,1}', '{NULL,NULL}', '{1,1}', '{NULL,NULL}', '{x,y}', '{d,d}', '{h,h}', '{q,q}', '{a,b}', '{l,l}'`
	batch := func() {
		explain(lockRowsSQL, keys, "tasks_pkey")
		explain(updateRowsSQL, cols+`)`, "tasks_pkey")
		explain(guardedUpdateRowsSQL, cols+`, '{NULL,g}')`, "tasks_pkey")
	}
	batch() // on the empty table
	// What only a scan can run (the log's prune) is not compiled for the
	// cost the settings give the scan.
	rows, err := conn.Query(ctx, `EXPLAIN DELETE FROM event_lines WHERE day < '2026-01-01'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(line, "JIT") {
			t.Errorf("the prune is compiled: %s", line)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// 20 000 pending tasks of one queue, 1% images, and some of another.
	if _, err := conn.Exec(ctx, `INSERT INTO tasks (`+columns+`, item)
		SELECT CASE WHEN n % 10 = 0 THEN 'other.example.com' ELSE 'h' END, 'q', lpad(n::text, 16, '0'), 'pending', 0, 0, n, NULL, n, NULL, '\x00',
			jsonb_build_object('kind', CASE WHEN n % 100 = 99 THEN 'image' ELSE 'video' END, 'n', n)
		FROM generate_series(1, 20000) n`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `ANALYZE tasks`); err != nil {
		t.Fatal(err)
	}
	batch()
	image := translate(json.RawMessage(`{"properties":{"kind":{"const":"image"}},"required":["kind"]}`))
	most := translate(json.RawMessage(`{"properties":{"n":{"minimum":5}}}`))
	explain(claimRows, `('h', 'q', 99999, '{}'::text[], 4)`, "tasks_claim")
	explain(countClaimable, `('h', 'q', 99999, '{}'::text[], 5)`, "tasks_claim")
	explain(claimDueRows, `('h', 'q', 99999, '{}'::text[], 4, 0)`, "tasks_claim")
	explain(candidatesQuery(false, image), `('h', 'q', 99999)`, "tasks_item")
	explain(candidatesQuery(true, image), `('h', 'q', 99999, 0, 5000, '')`, "tasks_item")
	explain(candidatesQuery(false, most), `('h', 'q', 99999)`, "tasks_claim")
	explain(candidatesQuery(true, most), `('h', 'q', 99999, 0, 5000, '')`, "tasks_claim")
}
