package e2e

import (
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestTokensNeverLogged: tokens sent every way a client can send them
// (header, unknown, on a public queue, ?access_token= on a socket) never
// appear in the server's log.
func TestTokensNeverLogged(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t), "--log-level", "debug") // with a line per request
	const unknown = "0123456789abcdef0123456789abcdef"
	s.post("resize", aliceToken, `{"url":"a"}`)
	s.do("POST", "/public", unknown, `{}`)
	s.do("GET", "/resize", unknown, "")
	s.do("POST", "/resize/claim", "Bearer-ish "+unknown, "")
	k := s.dial("/resize/work?worker=w&access_token="+boxToken, "")
	k.send(`{"type":"claim","ref":1}`)
	if got := k.next(); got["type"] != "task" {
		t.Fatalf("socket authenticated by query token: %v", got)
	}
	k.c.Close()
	if c, resp, err := s.dialRaw("/resize/work?access_token="+unknown, ""); err == nil || resp.StatusCode != http.StatusUnauthorized {
		if c != nil {
			c.Close()
		}
		t.Errorf("socket with an unknown query token: %v %v", err, resp)
	}
	eventually(t, "the socket requests to be logged", func() bool {
		return strings.Count(s.Stderr(), `"path":"/resize/work"`) >= 2
	})
	for _, tok := range []string{aliceToken, boxToken, unknown} {
		if strings.Contains(s.Stderr(), tok) {
			t.Errorf("token %s appears in the server log", tok)
		}
	}
}

// TestWhatPublicExposes: the host's queue names are public; a queue's
// settings, schemas and counts only to those with some right on it; task
// status only under the status rule, whatever else is public.
func TestWhatPublicExposes(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	writeFile(t, d.hosts+"/"+host+"/taskhoster-queues/inbox.json",
		`{"item":{},"access":{"post":"public","status":["alice"]}}`)
	s := start(t, d)
	if r := s.do("GET", "/", "", ""); r.Status != 200 || !strings.Contains(string(r.Body), `"inbox"`) {
		t.Errorf("host info: %d %s", r.Status, r.Body)
	}
	id := s.post("inbox", "", `{"secret":"s3"}`)
	for _, c := range []struct {
		path string
		want int
	}{
		{"/inbox", 200},       // post is public, so the queue's description is
		{"/inbox/" + id, 401}, // but not its tasks' status
		{"/resize", 401},      // nothing public on resize
	} {
		if r := s.do("GET", c.path, "", ""); r.Status != c.want {
			t.Errorf("anonymous GET %s: %d, want %d", c.path, r.Status, c.want)
		}
	}
	// The queue description never carries items.
	if r := s.do("GET", "/inbox", "", ""); strings.Contains(string(r.Body), "s3") {
		t.Errorf("queue info shows an item: %s", r.Body)
	}
	if r := s.do("GET", "/inbox/"+id, aliceToken, ""); r.Status != 200 || strings.Contains(string(r.Body), "s3") {
		t.Errorf("status view: %d %s (it never carries the item)", r.Status, r.Body)
	}
}

// TestDatabasePasswordNotInHelp: a database URL given in
// TASKHOSTER_DATABASE_URL carries a password; serve's help, which a typo
// on the command line also prints (to a terminal, or to journald under a
// service manager), never shows it.
func TestDatabasePasswordNotInHelp(t *testing.T) {
	t.Parallel()
	const password = "s3cret-pw-0123456789"
	for _, args := range [][]string{{"serve", "-h"}, {"serve", "--no-such-flag"}} {
		cmd := exec.Command(binary, args...)
		cmd.Env = append(os.Environ(), "TASKHOSTER_DATABASE_URL=postgres://taskhoster:"+password+"@127.0.0.1:1/tasks")
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), "--database-url") {
			t.Fatalf("%v printed no help:\n%s", args, out)
		}
		if strings.Contains(string(out), password) {
			t.Errorf("%v prints the database password:\n%s", args, out)
		}
	}
}
