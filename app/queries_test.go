package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/tests/contract"
)

// Each claim query of the differential tables, crossed with each item: an
// item posted alone to a queue whose items are free is claimed with the
// query (wait 0) exactly when the schema library accepts the item as it
// was posted. The stores' own suites hold them to the same tables
// (contract.DiffQueries); this one runs app's own matcher.
func TestClaimQueriesAgreeWithTheSchema(t *testing.T) {
	f := newFixture(t, domain.DefaultSettings())
	ctx := context.Background()
	n := 0
	for _, query := range contract.DiffQueries {
		s, err := schema.Compile(json.RawMessage(query))
		if err != nil {
			t.Fatalf("query %s: %v", query, err)
		}
		for _, item := range contract.DiffItems {
			if domain.OversizedNumber([]byte(item)) != "" {
				continue // refused by every post (TestBadItemsChangeNothing)
			}
			n++
			q := &domain.Queue{Host: f.q.Host, Name: fmt.Sprintf("q%d", n), Settings: f.q.Settings,
				Item: schema.Any(), Progress: schema.Any(), Result: schema.Any()}
			posted, err := f.svc.Post(ctx, q, "alice", []byte(item), app.PostOptions{})
			if err != nil {
				t.Fatalf("post %s: %v", item, err)
			}
			claimed, err := f.svc.Claim(ctx, q, "w", json.RawMessage(query), 0)
			if err != nil && !errors.Is(err, domain.ErrNotFound) {
				t.Fatalf("query %s, item %s: claim: %v", query, item, err)
			}
			got := err == nil && claimed.ID == posted.ID
			if want := len(s.Validate(json.RawMessage(item))) == 0; got != want {
				t.Errorf("query %s, item %s: claimed %v, but the schema accepts it: %v", query, item, got, want)
			}
		}
	}
}

// FuzzClaimQuery posts an item alone to a queue whose items are free and
// claims it with a query (wait 0): the claim takes it exactly when the
// schema library accepts it. `go test` runs its seed corpus, the
// differential tables' queries and items.
func FuzzClaimQuery(f *testing.F) {
	for i, q := range contract.DiffQueries {
		f.Add(q, contract.DiffItems[i%len(contract.DiffItems)])
	}
	for i, item := range contract.DiffItems {
		f.Add(contract.DiffQueries[i*7%len(contract.DiffQueries)], item)
	}
	f.Fuzz(func(t *testing.T, query, item string) {
		if !json.Valid([]byte(query)) || !json.Valid([]byte(item)) || domain.OversizedNumber([]byte(item)) != "" || domain.OversizedNumber([]byte(query)) != "" {
			return // not a query a claim takes, or an item a post takes
		}
		s, err := schema.Compile(json.RawMessage(query))
		if err != nil {
			return
		}
		fx := newFixture(t, domain.DefaultSettings())
		q := &domain.Queue{Host: fx.q.Host, Name: "free", Settings: fx.q.Settings,
			Item: schema.Any(), Progress: schema.Any(), Result: schema.Any()}
		ctx := context.Background()
		posted, err := fx.svc.Post(ctx, q, "alice", []byte(item), app.PostOptions{})
		if err != nil {
			t.Fatalf("post %s: %v", item, err)
		}
		claimed, err := fx.svc.Claim(ctx, q, "w", json.RawMessage(query), 0)
		if err != nil && !errors.Is(err, domain.ErrNotFound) {
			t.Fatalf("claim: %v", err)
		}
		got := err == nil && claimed.ID == posted.ID
		if want := len(s.Validate(json.RawMessage(item))) == 0; got != want {
			t.Errorf("query %s, item %s: claimed %v, but the schema accepts it: %v", query, item, got, want)
		}
	})
}
