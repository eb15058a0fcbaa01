package fsstore_test

import (
	"testing"

	"github.com/taskhoster/taskhoster/ports"
	"github.com/taskhoster/taskhoster/tests/contract"
)

func TestContract(t *testing.T) {
	contract.TestRepository(t, func(t *testing.T) ports.TaskRepository { return mustOpen(t, t.TempDir()) })
}

func TestPauses(t *testing.T) {
	contract.TestPauses(t, func(t *testing.T) ports.Pauses { return mustOpen(t, t.TempDir()) })
}
