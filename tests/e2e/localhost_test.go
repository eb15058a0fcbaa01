package e2e

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/client"
)

// TestNameLocalhostReachesTheHost: with the server URL
// http://task.example.com.localhost:PORT and no Host option, the Go
// client (HTTP and both sockets) and the command-line client reach the
// host folder task.example.com, although no DNS server or /etc/hosts entry
// knows that name.
func TestNameLocalhostReachesTheHost(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	_, port, err := net.SplitHostPort(strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + host + ".localhost:" + port
	if addrs, err := net.DefaultResolver.LookupHost(context.Background(), host+".localhost"); err == nil {
		t.Logf("this machine resolves %s.localhost to %v itself; the test proves less here", host, addrs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	alice := client.New(url, client.WithToken(aliceToken))
	id, err := alice.Post(ctx, "resize", map[string]any{"url": "https://ex.com/a.png", "width": 8})
	if err != nil {
		t.Fatalf("post to %s: %v", url, err)
	}
	views, err := alice.Watch(ctx, "resize", id) // the watch socket
	if err != nil {
		t.Fatalf("watch on %s: %v", url, err)
	}

	box := client.New(url, client.WithToken(boxToken))
	w := &client.Worker{Client: box, Queue: "resize", Name: "box-1", Limit: 1, // the worker socket
		Handler: func(context.Context, *client.Task) (any, error) { return map[string]bool{"ok": true}, nil }}
	worked := make(chan error, 1)
	go func() { worked <- w.Run(ctx) }()

	var last client.View
	for v, err := range views {
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		last = v
	}
	if err := <-worked; err != nil {
		t.Fatalf("worker on %s: %v", url, err)
	}
	if last.Status != "finished" || string(last.Result) != `{"ok":true}` {
		t.Errorf("last view %+v, want finished with the worker's result", last)
	}
	// The server saw the host the URL named: the event log has the task
	// under task.example.com.
	if events := strings.Join(s.eventsOf(id), ","); !strings.HasPrefix(events, "posted,claimed,result") {
		t.Errorf("events of %s: %s", id, events)
	}

	// The command-line client, told only the URL.
	r := s.cliAt(url, "", "status", "resize", id, "--token", aliceToken)
	if r.code != 0 || !strings.Contains(r.stdout, `"status": "finished"`) {
		t.Errorf("status over %s: exit %d, stdout %q, stderr %q", url, r.code, r.stdout, r.stderr)
	}
	r = s.cliAt(url, "", "post", "public", `{"n":1}`)
	if r.code != 0 || len(strings.TrimSpace(r.stdout)) != 16 {
		t.Errorf("post over %s: exit %d, stdout %q, stderr %q", url, r.code, r.stdout, r.stderr)
	}
}

// cliAt runs the command-line client with TASKHOSTER_SERVER=url and no
// TASKHOSTER_HOST, so the URL alone picks the host.
func (s *server) cliAt(url, stdin string, args ...string) cliRun {
	s.t.Helper()
	var env []string
	for _, kv := range (&server{url: url}).cliEnv() {
		if !strings.HasPrefix(kv, "TASKHOSTER_HOST=") {
			env = append(env, kv)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env, cmd.Stdin = env, strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run()
	if ctx.Err() != nil {
		s.t.Fatalf("taskhoster %v did not end within 60s; stderr: %s", args, stderr.String())
	}
	return cliRun{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}
