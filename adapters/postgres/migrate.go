package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrations are the schema's versions, in order: migration i+1 brings a
// database at version i to version i+1. Append, never edit.
var migrations = []string{
	// 1: tasks and pauses.
	`CREATE TABLE tasks (
		host            text     NOT NULL,
		queue           text     NOT NULL,
		id              text     NOT NULL,
		status          text     NOT NULL,
		stage           smallint NOT NULL, -- domain.Stage: 0 pending, 1 processing, 2 done
		priority        bigint   NOT NULL,
		eligible_at     bigint   NOT NULL, -- Unix ms: not_before, else posted_at
		not_before      bigint,
		posted_at       bigint   NOT NULL,
		idempotency_key text,
		record          bytea    NOT NULL, -- domain.EncodeTask
		CONSTRAINT tasks_pkey PRIMARY KEY (host, queue, id)
	);
	CREATE UNIQUE INDEX tasks_idempotency_key ON tasks (host, queue, idempotency_key)
		WHERE idempotency_key IS NOT NULL;
	-- Claims: claim order over the pending tasks.
	CREATE INDEX tasks_claim ON tasks (host, queue, priority DESC, eligible_at, id)
		WHERE status = 'pending';
	-- Each and List of pending tasks, by (EligibleAt, id).
	CREATE INDEX tasks_pending ON tasks (host, queue, eligible_at, id)
		WHERE status = 'pending';
	-- Due and Counts.Delayed.
	CREATE INDEX tasks_delayed ON tasks (host, queue, not_before)
		WHERE status = 'pending' AND not_before IS NOT NULL;
	-- Each and List of processing and done tasks, by (postedAt, id).
	CREATE INDEX tasks_posted ON tasks (host, queue, stage, posted_at, id);
	CREATE TABLE pauses (
		host  text NOT NULL,
		queue text NOT NULL,
		PRIMARY KEY (host, queue)
	);`,
	// 2: the event log (log.go).
	`CREATE TABLE log_days (
		day  text   PRIMARY KEY, -- YYYY-MM-DD, UTC
		size bigint NOT NULL     -- the bytes of its placed lines: the day file's size
	);
	CREATE TABLE event_lines (
		seq   bigserial PRIMARY KEY, -- insertion order
		day   text      NOT NULL,
		off   bigint,                -- the line's byte offset in its day file; NULL until placed
		host  text      NOT NULL,
		queue text      NOT NULL,
		id    text      NOT NULL,
		line  bytea     NOT NULL     -- eventlog.EncodeLine, newline included
	);
	CREATE UNIQUE INDEX event_lines_off ON event_lines (day, off);
	CREATE INDEX event_lines_unplaced ON event_lines (seq) WHERE off IS NULL;`,
	// 3: the payload archive (log.go).
	`CREATE TABLE payloads (
		host     text        NOT NULL,
		queue    text        NOT NULL,
		id       text        NOT NULL,
		file     text        NOT NULL, -- eventlog.ItemFile, ProgressFile, ResultFile, ErrorFile
		body     bytea       NOT NULL,
		modified timestamptz NOT NULL,
		PRIMARY KEY (host, queue, id, file)
	);
	CREATE INDEX payloads_modified ON payloads (modified);`,
	// 4: the item as jsonb, for claim queries in SQL (query.go). Written
	// on INSERT only (by a trigger until migration 5, then by the INSERT
	// itself), as an item never changes after it is posted; NULL when jsonb cannot hold it (a \u0000, a lone surrogate)
	// or it is null (which a store reads back as no item at all), and such
	// a task is always tested in Go. The GIN index answers
	// containment (item @> '{"kind":"image"}'); tasks_item_other holds the
	// few pending tasks whose item is NULL or not an object, which every
	// claim query also reads.
	`ALTER TABLE tasks ADD COLUMN item jsonb;
	CREATE FUNCTION taskhoster_item(record bytea) RETURNS jsonb
		LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
	BEGIN
		RETURN nullif((convert_from(record, 'UTF8')::json -> 'item')::jsonb, 'null');
	EXCEPTION WHEN OTHERS THEN
		RETURN NULL;
	END $$;
	CREATE FUNCTION tasks_set_item() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		NEW.item := taskhoster_item(NEW.record);
		RETURN NEW;
	END $$;
	CREATE TRIGGER tasks_item BEFORE INSERT ON tasks
		FOR EACH ROW EXECUTE FUNCTION tasks_set_item();
	UPDATE tasks SET item = taskhoster_item(record);
	CREATE INDEX tasks_item ON tasks USING gin (item jsonb_path_ops)
		WHERE status = 'pending';
	CREATE INDEX tasks_item_other ON tasks (host, queue)
		WHERE status = 'pending' AND (item IS NULL OR jsonb_typeof(item) <> 'object');
	-- Without statistics on the item's type the planner takes "not an
	-- object" for nearly every row and never uses the two indexes.
	CREATE STATISTICS tasks_item_type ON (jsonb_typeof(item)) FROM tasks;`,
	// 5: the INSERT writes item itself (rows.go, itemArg), calling
	// taskhoster_item only for an item jsonb might refuse: the trigger
	// ran that function, and its exception block's subtransaction, for
	// every post.
	`DROP TRIGGER tasks_item ON tasks;
	DROP FUNCTION tasks_set_item();`,
	// 6: fewer index entries per write. An event line is inserted without
	// an offset and placed later: the index of offsets now holds placed
	// lines only, and seq, unique by its sequence, keeps only the index of
	// the lines to place, so an insert writes one index entry, not three.
	// A task's row gets a new version at every change; pending versions no
	// longer go into the index of processing and done tasks (List and Each
	// of those name their stage).
	`ALTER TABLE event_lines DROP CONSTRAINT event_lines_pkey;
	DROP INDEX event_lines_off;
	CREATE UNIQUE INDEX event_lines_off ON event_lines (day, off) WHERE off IS NOT NULL;
	DROP INDEX tasks_posted;
	CREATE INDEX tasks_posted ON tasks (host, queue, stage, posted_at, id) WHERE stage > 0;`,
	// 7: the indexes of pending tasks each say "pending" in a way only
	// the queries it serves imply, so that no other plan can take it and
	// sort: claims status = 'pending' (tasks_claim), pages of pending
	// tasks stage = 0 (tasks_pending), claim queries on the item also
	// the item (tasks_item; tasks_item_other was apart already, and
	// tasks_delayed is migration 8's). With one predicate for all, a plan made while the
	// planner thought few tasks waited (a new table, or statistics taken
	// as a queue ran dry) read a claim's rows from another index and
	// sorted every pending task at each claim, and a connection keeps
	// its generic plan.
	`DROP INDEX tasks_pending;
	CREATE INDEX tasks_pending ON tasks (host, queue, eligible_at, id) WHERE stage = 0;
	DROP INDEX tasks_item;
	CREATE INDEX tasks_item ON tasks USING gin (item jsonb_path_ops)
		WHERE status = 'pending' AND item IS NOT NULL;`,
	// 8: the same for the index of delayed tasks: the counts of tasks
	// come due say pending as stage < 1. With statistics of a run kept
	// through TRUNCATE and the indexes all nearly empty, their plan read
	// tasks_claim and counted over every pending task.
	`DROP INDEX tasks_delayed;
	CREATE INDEX tasks_delayed ON tasks (host, queue, not_before) WHERE stage < 1 AND not_before IS NOT NULL;`,
}

// migrationLock is the advisory lock key that serialises migrations: any
// number, the same in every server.
const migrationLock = 0x7461736b686f7374 // "taskhost"

// migrate brings the database's schema to the latest version, in one
// transaction under an advisory lock, so that of several servers starting
// at once one migrates and the others find the work done.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fail("migrate the schema", err)
	}
	defer rollback(tx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
		return fail("lock for migrating", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    integer PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return fail("create schema_migrations", err)
	}
	var current int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fail("read the schema version", err)
	}
	if current > len(migrations) {
		return fmt.Errorf("the database's schema is at version %d, newer than this server knows (%d): run a newer taskhoster", current, len(migrations))
	}
	for v := current + 1; v <= len(migrations); v++ {
		if err := apply(ctx, tx, v); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fail("commit the migrations", err)
	}
	return nil
}

func apply(ctx context.Context, tx pgx.Tx, v int) error {
	if _, err := tx.Exec(ctx, migrations[v-1]); err != nil {
		return fail(fmt.Sprintf("migrate the schema to version %d", v), err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, v); err != nil {
		return fail("record the schema version", err)
	}
	return nil
}
