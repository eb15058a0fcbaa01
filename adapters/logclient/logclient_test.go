package logclient_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/adapters/logclient"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

const token = "a11ce0000000000000000000000000a1"

// api answers the log API of SPEC §8 for the host task.example.com and
// the token above, and records what it was asked.
func api(t *testing.T) (*logclient.Client, *[]string) {
	t.Helper()
	var asked []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_logs/tasks", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `[{"day":"2026-07-25","size":10},{"day":"2026-07-26","size":20}]`)
	})
	mux.HandleFunc("GET /_logs/tasks/{day}", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("day") {
		case "2026-07-26":
			w.Header().Set("X-Next-Offset", "20")
			io.WriteString(w, "{\"a\":1}\n")
		case "2026-07-27":
			w.Header().Set("X-Next-Offset", "nope")
		default:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":"not_found","message":"no such day file"}`)
		}
	})
	mux.HandleFunc("GET /_logs/payloads/{queue}/{id}/{file}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("queue") != "resize" {
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `{"error":"forbidden","message":"no logs access"}`)
			return
		}
		io.WriteString(w, `{"url":"x"}`)
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.Host+" "+r.URL.RequestURI())
		if r.Host != "task.example.com" || r.Header.Get("Authorization") != "Bearer "+token {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":"unauthorized","message":"who are you"}`)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := logclient.New(srv.URL+"/", "task.example.com", token, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	return c, &asked
}

func TestClientSpeaksTheLogAPI(t *testing.T) {
	c, asked := api(t)
	ctx := context.Background()

	days, err := c.Days(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]tasklog.Day{{Day: "2026-07-25", Size: 10}, {Day: "2026-07-26", Size: 20}}, days); diff != "" {
		t.Errorf("days (-want +got):\n%s", diff)
	}

	body, next, err := c.Lines(ctx, "2026-07-26", 7)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(body)
	body.Close()
	if string(data) != "{\"a\":1}\n" || next != 20 {
		t.Errorf("lines = %q, next %d", data, next)
	}
	if _, _, err := c.Lines(ctx, "2026-07-01", 0); domain.KindOf(err) != domain.KindNotFound {
		t.Errorf("pruned day: err = %v, want KindNotFound", err)
	}
	if _, _, err := c.Lines(ctx, "2026-07-27", 0); err == nil {
		t.Errorf("a bad X-Next-Offset was accepted")
	}

	b, err := c.Payload(ctx, "resize", "9f2c1a0b7d4e6f83", "item.json")
	if err != nil || string(b) != `{"url":"x"}` {
		t.Errorf("payload = %q, %v", b, err)
	}
	if _, err := c.Payload(ctx, "secret", "9f2c1a0b7d4e6f83", "item.json"); domain.KindOf(err) != domain.KindForbidden {
		t.Errorf("forbidden payload: err = %v", err)
	}

	want := []string{
		"task.example.com /_logs/tasks",
		"task.example.com /_logs/tasks/2026-07-26?offset=7",
		"task.example.com /_logs/tasks/2026-07-01?offset=0",
		"task.example.com /_logs/tasks/2026-07-27?offset=0",
		"task.example.com /_logs/payloads/resize/9f2c1a0b7d4e6f83/item.json",
		"task.example.com /_logs/payloads/secret/9f2c1a0b7d4e6f83/item.json",
	}
	if diff := cmp.Diff(want, *asked); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

func TestClientNeverBuildsAPathFromBadNames(t *testing.T) {
	c, asked := api(t)
	ctx := context.Background()
	for _, args := range [][3]string{
		{"../x", "9f2c1a0b7d4e6f83", "item.json"},
		{"resize", "../../etc", "item.json"},
		{"resize", "9f2c1a0b7d4e6f83", "../passwd"},
	} {
		if _, err := c.Payload(ctx, args[0], args[1], args[2]); err == nil {
			t.Errorf("Payload%q was sent", args)
		}
	}
	if _, _, err := c.Lines(ctx, "../2026", 0); err == nil {
		t.Errorf("a bad day was sent")
	}
	if len(*asked) != 0 {
		t.Errorf("requests were sent: %v", *asked)
	}
}

func TestClientReportsRefusals(t *testing.T) {
	c, _ := api(t)
	bad, err := logclient.New(c.Host(), "", "", nil)
	if err == nil {
		t.Fatalf("a server URL without a scheme was accepted: %v", bad)
	}
	wrong, err := logclient.New("http://127.0.0.1:1", "task.example.com", token, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wrong.Days(context.Background()); err == nil {
		t.Errorf("no error from a closed port")
	}
}

// A body over the mirror's cap is refused as too large, by its
// Content-Length before a byte of it is read: a pull can then skip it and
// go on, instead of failing on it at every pull from then on.
func TestClientRefusesAPayloadOverItsCap(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A long progress.jsonl: only its length is sent, then the
		// connection ends.
		w.Header().Set("Content-Length", "1073741824")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	c, err := logclient.New(srv.URL, "task.example.com", token, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Payload(context.Background(), "resize", "9f2c1a0b7d4e6f83", "progress.jsonl")
	if domain.KindOf(err) != domain.KindTooLarge {
		t.Errorf("payload of 1 GiB: err = %v (kind %v), want KindTooLarge", err, domain.KindOf(err))
	}
}
