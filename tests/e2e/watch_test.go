package e2e

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"
)

// watchAll reads views from a watch socket until the server closes it, and
// returns each view's "status progress result" summary and the close code.
func watchAll(t *testing.T, k *socket) ([]string, int) {
	t.Helper()
	var got []string
	for {
		_ = k.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, data, err := k.c.ReadMessage()
		if ce, ok := err.(*websocket.CloseError); ok {
			return got, ce.Code
		}
		if err != nil {
			t.Errorf("watch read: %v (after %v)", err, got)
			return got, -1
		}
		got = append(got, summary(t, data))
	}
}

// summary is a view as "status attempts progress result", after checking
// it has exactly the view's fields.
func summary(t *testing.T, data []byte) string {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Errorf("view %q: %v", data, err)
		return ""
	}
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	// Exactly the fields of the status view (SPEC §3).
	viewKeys := []string{"attempts", "error", "finishedAt", "id", "postedAt", "progress", "queue", "result", "status", "updatedAt"}
	if diff := cmp.Diff(viewKeys, keys); diff != "" {
		t.Errorf("view keys (-want +got):\n%s", diff)
	}
	progress, _ := json.Marshal(v["progress"])
	result, _ := json.Marshal(v["result"])
	return fmt.Sprintf("%v %v %s %s", v["status"], v["attempts"], progress, result)
}

// TestWatchViewsInOrder: two watchers of one task see every change, in
// order, then a close 1000; the terminal view counts as one fetch however
// many see it.
func TestWatchViewsInOrder(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	id := s.post("resize", aliceToken, `{"url":"a"}`)

	watchers := []*socket{s.dial("/resize/"+id+"/watch", aliceToken), s.dial("/resize/"+id+"/watch?access_token="+aliceToken, "")}
	for _, w := range watchers {
		// The first view comes at once; once it is here the watcher is subscribed.
		raw := w.nextRaw()
		if got := summary(t, []byte(raw)); got != "pending 0 null null" {
			t.Fatalf("first view = %s", raw)
		}
		if want := s.do("GET", "/resize/"+id, aliceToken, "").Body; strings.TrimSpace(string(want)) != raw {
			t.Errorf("first view differs from GET:\n watch %s\n   GET %s", raw, want)
		}
	}

	k := s.dial("/resize/work?worker=box-1", boxToken)
	k.claimTask(1)
	for i, p := range []int{30, 60} {
		k.send(fmt.Sprintf(`{"type":"progress","ref":%d,"id":"%s","progress":{"percent":%d}}`, 10+i, id, p))
		if m := k.next(); m["accepted"] != true {
			t.Fatalf("progress: %v", m)
		}
	}
	k.send(`{"type":"result","ref":20,"id":"` + id + `","result":{"url":"b"}}`)
	if m := k.next(); m["accepted"] != true {
		t.Fatalf("result: %v", m)
	}

	want := []string{
		"processing 1 null null",
		`processing 1 {"percent":30} null`,
		`processing 1 {"percent":60} null`,
		`finished 1 {"percent":60} {"url":"b"}`,
	}
	for i, w := range watchers {
		got, code := watchAll(t, w)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("watcher %d views (-want +got):\n%s", i, diff)
		}
		if code != websocket.CloseNormalClosure {
			t.Errorf("watcher %d closed with %d, want 1000", i, code)
		}
	}

	// A watcher of a task already terminal gets its view and the close.
	late := s.dial("/resize/"+id+"/watch", aliceToken)
	if got, code := watchAll(t, late); len(got) != 1 || got[0] != want[3] || code != websocket.CloseNormalClosure {
		t.Errorf("watching a finished task: %v, close %d", got, code)
	}
	if diff := cmp.Diff([]string{"posted", "claimed", "progress", "progress", "result", "fetched"}, s.eventsOf(id)); diff != "" {
		t.Errorf("events, with exactly one fetch (-want +got):\n%s", diff)
	}

	// Watching needs the status right, and a task of this queue.
	for _, c := range []struct {
		path, token string
		want        int
	}{
		{"/resize/" + id + "/watch", "", 401},
		{"/resize/" + id + "/watch", boxToken, 403},
		{"/resize/0123456789abcdef/watch", aliceToken, 404},
		{"/public/" + id + "/watch", "", 404},
	} {
		_, resp, err := s.dialRaw(c.path, c.token)
		if err == nil || resp == nil || resp.StatusCode != c.want {
			t.Errorf("watch %s with %q: %v, want HTTP %d", c.path, c.token, err, c.want)
		}
	}
}

// TestWatchManyTasks: watchers of many tasks, whose changes happen
// concurrently, each see their own task's changes, all of them, in order.
func TestWatchManyTasks(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	const tasks, steps = 16, 5
	ids := make([]string, tasks)
	watchers := make([]*socket, tasks)
	for i := range ids {
		ids[i] = s.post("resize", aliceToken, fmt.Sprintf(`{"url":"u%d"}`, i))
		watchers[i] = s.dial("/resize/"+ids[i]+"/watch", aliceToken)
		if got := summary(t, []byte(watchers[i].nextRaw())); got != "pending 0 null null" {
			t.Fatalf("first view of %s = %s", ids[i], got)
		}
	}
	for range ids {
		r := s.do("POST", "/resize/claim", boxToken, `{"worker":"box-1"}`)
		if r.Status != 200 {
			t.Fatalf("claim: %d %s", r.Status, r.Body)
		}
	}

	// Each task's changes come one after another; the tasks go side by side.
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := 1; p <= steps; p++ {
				body := fmt.Sprintf(`{"worker":"box-1","progress":{"percent":%d}}`, p)
				r := s.do("POST", "/resize/"+id+"/progress", boxToken, body)
				if r.Status != 200 || !strings.Contains(string(r.Body), `"accepted":true`) {
					t.Errorf("progress %d of %s: %d %s", p, id, r.Status, r.Body)
				}
			}
			r := s.do("POST", "/resize/"+id+"/result", boxToken, `{"worker":"box-1","result":{"n":1}}`)
			if r.Status != 200 {
				t.Errorf("result of %s: %d %s", id, r.Status, r.Body)
			}
		}()
	}

	want := []string{"processing 1 null null"}
	for p := 1; p <= steps; p++ {
		want = append(want, fmt.Sprintf(`processing 1 {"percent":%d} null`, p))
	}
	want = append(want, fmt.Sprintf(`finished 1 {"percent":%d} {"n":1}`, steps))
	results := make([][]string, tasks)
	codes := make([]int, tasks)
	var readers sync.WaitGroup
	for i, w := range watchers {
		readers.Add(1)
		go func() {
			defer readers.Done()
			results[i], codes[i] = watchAll(t, w)
		}()
	}
	wg.Wait()
	readers.Wait()
	for i, id := range ids {
		if diff := cmp.Diff(want, results[i]); diff != "" {
			t.Errorf("views of %s (-want +got):\n%s", id, diff)
		}
		if codes[i] != websocket.CloseNormalClosure {
			t.Errorf("watch of %s closed with %d", id, codes[i])
		}
		if n := strings.Count(strings.Join(s.eventsOf(id), ","), "fetched"); n != 1 {
			t.Errorf("task %s fetched %d times, want 1", id, n)
		}
	}
}
