package postgres_test

import (
	"context"
	"testing"

	"github.com/taskhoster/taskhoster/adapters/postgres"
	"github.com/taskhoster/taskhoster/internal/pgtest"
	"github.com/taskhoster/taskhoster/ports"
	"github.com/taskhoster/taskhoster/tests/contract"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestContract(t *testing.T) {
	contract.TestRepository(t, func(t *testing.T) ports.TaskRepository { return mustOpen(t, pgtest.Database(t)) })
}

// The same contract with claims taken from stock, as a server alone on
// its database takes them (stock.go).
func TestContractAlone(t *testing.T) {
	contract.TestRepository(t, func(t *testing.T) ports.TaskRepository {
		s := mustOpen(t, pgtest.Database(t))
		s.OnAlone(func() bool { return true })
		return s
	})
}

func TestPauses(t *testing.T) {
	contract.TestPauses(t, func(t *testing.T) ports.Pauses { return mustOpen(t, pgtest.Database(t)) })
}

func mustOpen(tb testing.TB, url string) *postgres.Store {
	tb.Helper()
	s, err := postgres.Open(context.Background(), url)
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	tb.Cleanup(s.Close)
	return s
}
