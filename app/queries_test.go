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
