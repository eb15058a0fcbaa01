package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/adapters/clock"
	"github.com/taskhoster/taskhoster/adapters/folderconfig"
	"github.com/taskhoster/taskhoster/adapters/httpapi"
	"github.com/taskhoster/taskhoster/adapters/index"
	"github.com/taskhoster/taskhoster/adapters/notify"
	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// reloadAtClaim is a store whose next claim, once it has taken a task,
// runs reload before the claim returns: a reload that lands between a
// claim's win and its answer.
type reloadAtClaim struct {
	ports.TaskRepository
	reload func()
}

func (r *reloadAtClaim) ClaimNext(ctx context.Context, q domain.QueueRef, m ports.Matcher, now time.Time, fn func(*domain.Task) error, then ports.Then) (domain.Task, error) {
	t, err := r.TaskRepository.ClaimNext(ctx, q, m, now, fn, then)
	if err == nil && r.reload != nil {
		r.reload()
		r.reload = nil
	}
	return t, err
}

// liveAPI is the API over repo and a live hosts folder in which box may
// work on resize, and the reload that takes that right away (the file
// rewritten, then Reload, as the folder's watcher would).
func liveAPI(t *testing.T, repo ports.TaskRepository) (api *httpapi.API, boxLosesWork func()) {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		path := filepath.Join(dir, testHost, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("taskhoster-users/alice.json", `{"name":"alice","token":"`+aliceToken+`"}`)
	write("taskhoster-users/box.json", `{"name":"box","token":"`+boxToken+`"}`)
	write("taskhoster-queues/resize.json", `{"item":{},"access":{"post":["alice"],"status":["alice"],"work":["box"]}}`)
	live, err := folderconfig.New(dir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	api = httpapi.New(app.New(app.Deps{
		Repo: repo, Syncer: nopSync{}, Log: nopLog{}, Notifier: notify.NewHub(),
		Clock: clock.System{}, Compiler: schema.Compiler{}, Pauses: &memPauses{},
	}), live, httpapi.Options{})
	return api, func() {
		write("taskhoster-queues/resize.json", `{"item":{},"access":{"post":["alice"],"status":["alice"],"work":["alice"]}}`)
		if _, problems := live.Reload(); folderconfig.HasErrors(problems) {
			t.Errorf("reload: %v", problems)
		}
	}
}

// TestAClaimWonAsItsRightGoesGivesItsTaskBack: an HTTP claim that takes a
// task just as a reload takes the worker's work right away is answered the
// error (403), and the task is pending again at once, not leased to a
// worker that may no longer hand it in.
func TestAClaimWonAsItsRightGoesGivesItsTaskBack(t *testing.T) {
	repo := &reloadAtClaim{TaskRepository: index.New()}
	api, boxLosesWork := liveAPI(t, repo)
	id := postAs(t, api, "resize", aliceToken, `{}`)
	repo.reload = boxLosesWork
	code, m := call(t, api, "POST", "/resize/claim", boxToken, `{}`)
	wantError(t, "a claim won as the work right went", code, m, http.StatusForbidden, "forbidden")

	got, err := repo.Get(context.Background(), domain.Key{Host: testHost, Queue: "resize", ID: id})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != domain.Pending || got.Lease != nil {
		t.Errorf("task after its claim was refused: status %s, lease %v; want pending, no lease", got.Status, got.Lease)
	}
}

// TestAClaimLetInJustBeforeAReloadIsEndedByIt: a claim authorized under
// the configuration before a reload, whose wait begins only after the
// reload's Recheck ran (here: its body came after the reload), is not
// left waiting with the work right the reload took away: it is answered
// 403 at once, as Recheck would have, not 204 at the end of its wait (nor
// a task it would have to give back, an attempt spent).
func TestAClaimLetInJustBeforeAReloadIsEndedByIt(t *testing.T) {
	api, boxLosesWork := liveAPI(t, index.New())

	body, send := io.Pipe()
	req := httptest.NewRequest("POST", "http://"+testHost+"/resize/claim", body)
	req.Header.Set("Authorization", "Bearer "+boxToken)
	rec := httptest.NewRecorder()
	served := make(chan struct{})
	go func() {
		defer close(served)
		api.ServeHTTP(rec, req)
	}()
	// The handler reads the body only once it has authorized the claim.
	if _, err := send.Write([]byte(`{"wait":`)); err != nil {
		t.Fatal(err)
	}
	boxLosesWork()
	api.Recheck()
	if _, err := send.Write([]byte(`1}`)); err != nil {
		t.Fatal(err)
	}
	send.Close()
	<-served
	var m map[string]any
	if rec.Body.Len() > 0 {
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatalf("body %q: %v", rec.Body, err)
		}
	}
	wantError(t, "a claim let in just before a reload took its work right", rec.Code, m, http.StatusForbidden, "forbidden")
}
