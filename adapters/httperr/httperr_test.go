package httperr

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/domain"
)

// TestTable pins the whole table: every Kind, its HTTP status, and whether
// its message is masked. Changing a row changes what clients see.
func TestTable(t *testing.T) {
	want := []struct {
		kind   domain.Kind
		status int
		masked bool
	}{
		{domain.KindInternal, 500, true},
		{domain.KindInvalid, 400, false},
		{domain.KindSchema, 422, false},
		{domain.KindNotFound, 404, false},
		{domain.KindConflict, 409, false},
		{domain.KindUnauthorized, 401, false},
		{domain.KindForbidden, 403, false},
		{domain.KindTooLarge, 413, false},
		{domain.KindUnavailable, 503, false},
	}
	if len(rules) != len(want) {
		t.Errorf("the table has %d rows, this test %d", len(rules), len(want))
	}
	for _, w := range want {
		if got := RuleOf(w.kind); got != (Rule{Status: w.status, Masked: w.masked}) {
			t.Errorf("%v: got %+v, want status %d masked %v", w.kind, got, w.status, w.masked)
		}
	}
	// The Kinds are 0 to len(want)-1: one past the last is unknown, which
	// Kind.String and the table both treat as internal. A new Kind fails here
	// until it has a row above.
	next := domain.Kind(len(want))
	if next.String() != "internal" {
		t.Errorf("Kind %d is %q: a new Kind needs a row in the table and in this test", next, next)
	}
	if RuleOf(next) != RuleOf(domain.KindInternal) {
		t.Errorf("an unknown Kind is %+v, want the internal rule", RuleOf(next))
	}
}

func TestOf(t *testing.T) {
	details := []domain.Violation{{Path: "/width", Message: "must be >= 1"}}
	cases := []struct {
		name string
		err  error
		want Reply
	}{
		{"plain error", errors.New("open /var/secret: permission denied"),
			Reply{500, Body{"internal", "internal error", []domain.Violation{}}}},
		{"internal kind keeps its code, not its text",
			&domain.Error{Kind: domain.KindInternal, Code: domain.CodeIllegalTransition, Message: "task a, pending: bad move"},
			Reply{500, Body{"illegal_transition", "internal error", []domain.Violation{}}}},
		{"wrapped", fmt.Errorf("post: %w", domain.ErrNotFound),
			Reply{404, Body{"not_found", "no such task", []domain.Violation{}}}},
		{"details", &domain.Error{Kind: domain.KindSchema, Code: domain.CodeInvalidItem, Message: "bad", Details: details},
			Reply{422, Body{"invalid_item", "bad", details}}},
		{"unavailable is not masked", domain.E(domain.KindUnavailable, domain.CodeStorageUnavailable, "task store is closed"),
			Reply{503, Body{"storage_unavailable", "task store is closed", []domain.Violation{}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Of(c.err)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if got.ServerFault() != (got.Status >= 500) {
				t.Errorf("ServerFault = %v for %d", got.ServerFault(), got.Status)
			}
		})
	}
}

func TestWrite(t *testing.T) {
	cases := []struct {
		err                 error
		status              int
		body, authenticated string
	}{
		{domain.E(domain.KindUnauthorized, domain.CodeUnauthorized, "token needed"), 401,
			`{"error":"unauthorized","message":"token needed","details":[]}` + "\n", "Bearer"},
		{errors.New("boom"), 500, `{"error":"internal","message":"internal error","details":[]}` + "\n", ""},
	}
	for _, c := range cases {
		rec := httptest.NewRecorder()
		Of(c.err).Write(rec)
		if rec.Code != c.status || rec.Body.String() != c.body ||
			rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("WWW-Authenticate") != c.authenticated {
			t.Errorf("%v: got %d %q %v, want %d %q", c.err, rec.Code, rec.Body, rec.Header(), c.status, c.body)
		}
	}
}
