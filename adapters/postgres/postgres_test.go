package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskhoster/taskhoster/adapters/postgres"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/internal/pgtest"
)

var epoch = time.UnixMilli(1751500000000).UTC()

func post(tb testing.TB, n int) domain.Task {
	tb.Helper()
	t, _ := domain.Post(fmt.Sprintf("%016x", 0xb0000000+n), "task.example.com", "resize", json.RawMessage(`{}`), "alice", epoch)
	return t
}

// Servers starting at once on a new database migrate it once; every one
// of them opens.
func TestServersStartingAtOnceMigrateOnce(t *testing.T) {
	url := pgtest.Database(t)
	const servers = 6
	var wg sync.WaitGroup
	errs := make([]error, servers)
	for i := range servers {
		wg.Go(func() {
			s, err := postgres.Open(context.Background(), url)
			if err == nil {
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("server %d: %v", i, err)
		}
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var versions, latest int
	if err := conn.QueryRow(context.Background(), `SELECT count(*), max(version) FROM schema_migrations`).Scan(&versions, &latest); err != nil {
		t.Fatal(err)
	}
	if versions != latest || latest < 1 {
		t.Errorf("schema_migrations holds %d rows up to version %d, want one per version", versions, latest)
	}
	// A restart finds the schema current and changes nothing.
	mustOpen(t, url)
}

// A database that cannot be reached is KindUnavailable (503
// storage_unavailable), at Open and on a call; once it is back, calls work.
func TestUnreachableDatabaseIsUnavailable(t *testing.T) {
	url := pgtest.Database(t)
	if _, err := postgres.Open(context.Background(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"); !isUnavailable(err) {
		t.Errorf("open on a closed port = %v, want storage_unavailable", err)
	}
	s := mustOpen(t, url)
	task := post(t, 1)
	if err := s.Create(context.Background(), task, nil); err != nil {
		t.Fatal(err)
	}
	// Cut every connection of the store, as a database restart does.
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`); err != nil {
		t.Fatal(err)
	}
	k := domain.KeyOf(task)
	for try := 0; ; try++ {
		_, err := s.Get(context.Background(), k)
		if err == nil {
			break
		}
		if !isUnavailable(err) {
			t.Fatalf("get over a cut connection = %v, want storage_unavailable", err)
		}
		if try == 10 {
			t.Fatalf("the store did not reconnect: %v", err)
		}
	}
	s.Close()
	if _, err := s.Get(context.Background(), k); !isUnavailable(err) {
		t.Errorf("get on a closed store = %v, want storage_unavailable", err)
	}
}

func isUnavailable(err error) bool {
	var de *domain.Error
	return errors.As(err, &de) && de.Kind == domain.KindUnavailable && de.Code == domain.CodeStorageUnavailable
}

// A Get sees a change only once its Then has returned: the change is
// committed before Then runs, and Get waits for it.
func TestGetWaitsForThen(t *testing.T) {
	s := mustOpen(t, pgtest.Database(t))
	task := post(t, 1)
	entered, release := make(chan struct{}), make(chan struct{})
	created := make(chan error, 1)
	go func() {
		created <- s.Create(context.Background(), task, func(domain.Task) error {
			close(entered)
			<-release
			return nil
		})
	}()
	<-entered
	got := make(chan error, 1)
	go func() {
		_, err := s.Get(context.Background(), domain.KeyOf(task))
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("get returned (%v) while the create's Then was running", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("get after the Then: %v", err)
	}
}
