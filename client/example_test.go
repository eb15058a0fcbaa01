package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"time"

	"github.com/taskhoster/taskhoster/client"
)

// A stand-in for a Taskhoster server, so that the example runs: it takes
// posts to the queue "resize" and refuses items without a width.
func exampleServer() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var item map[string]any
		_ = json.Unmarshal(body, &item)
		if _, ok := item["width"]; !ok {
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprint(w, `{"error":"invalid_item","message":"the item does not match the queue's schema","details":[{"path":"","message":"missing property 'width'"}]}`)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"3f2a9c0d1b7e4a55","status":"pending"}`)
	}))
}

func ExampleClient_Post() {
	srv := exampleServer()
	defer srv.Close()
	c := client.New(srv.URL, client.WithHost("task.example.com"), client.WithToken("a11ce000000000000000000000000001"))

	id, err := c.Post(context.Background(), "resize", map[string]any{"url": "https://ex.com/a.png", "width": 800})
	fmt.Println(id, err)

	_, err = c.Post(context.Background(), "resize", map[string]any{"url": "https://ex.com/a.png"})
	var e *client.Error
	if errors.As(err, &e) {
		fmt.Println(e.Status, e.Code)
		for _, v := range e.Details {
			fmt.Printf("%q: %s\n", v.Path, v.Message)
		}
	}
	// Output:
	// 3f2a9c0d1b7e4a55 <nil>
	// 422 invalid_item
	// "": missing property 'width'
}

// Watch follows a task to its end, one status view per change.
func ExampleClient_Watch() {
	ctx := context.Background()
	c := client.New("http://127.0.0.1:8080", client.WithHost("task.example.com"), client.WithToken("a11ce000000000000000000000000001"))
	id, err := c.Post(ctx, "resize", map[string]any{"url": "https://ex.com/a.png", "width": 800})
	if err != nil {
		log.Fatal(err)
	}
	views, err := c.Watch(ctx, "resize", id)
	if err != nil {
		log.Fatal(err)
	}
	for v, err := range views {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(v.Status, string(v.Progress), string(v.Result))
	}
}

// Claim, report progress and hand in a result, one HTTP call each.
func ExampleClient_Claim() {
	ctx := context.Background()
	c := client.New("http://127.0.0.1:8080", client.WithHost("task.example.com"), client.WithToken("b0c50000000000000000000000000002"))
	task, err := c.Claim(ctx, "resize", client.ClaimRequest{Worker: "box-1", Wait: 20 * time.Second})
	if errors.Is(err, client.ErrNoTask) {
		return // nothing arrived within 20 s
	}
	if err != nil {
		log.Fatal(err)
	}
	if _, err := task.Progress(ctx, map[string]int{"percent": 40}); err != nil {
		log.Fatal(err)
	}
	ack, err := c.Result(ctx, "resize", task.ID, "box-1", map[string]string{"url": "https://ex.com/a.jpg"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("accepted:", ack.Accepted)
}

// A worker with four tasks in flight that stops gently on Ctrl-C.
func ExampleWorker() {
	c := client.New("http://127.0.0.1:8080", client.WithHost("task.example.com"), client.WithToken("b0c50000000000000000000000000002"))
	w := &client.Worker{
		Client:      c,
		Queue:       "resize",
		Name:        "box-1",
		Concurrency: 4,
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, nil)),
		Handler: func(ctx context.Context, t *client.Task) (any, error) {
			var item struct {
				URL   string `json:"url"`
				Width int    `json:"width"`
			}
			if err := json.Unmarshal(t.Item, &item); err != nil {
				// A task that can never succeed: say so in the result.
				return map[string]string{"error": err.Error()}, nil
			}
			if _, err := t.Progress(ctx, map[string]int{"percent": 50}); err != nil {
				return nil, err // no result: the task is retried after its lease
			}
			return map[string]string{"url": item.URL + ".jpg"}, nil
		},
	}
	interrupt := make(chan os.Signal, 1)
	signal.Notify(interrupt, os.Interrupt)
	go func() { <-interrupt; w.Drain() }()
	if err := w.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}
