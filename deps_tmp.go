//go:build tools

package main
import (
 _ "github.com/go-chi/chi/v5"
 _ "github.com/gorilla/websocket"
 _ "github.com/santhosh-tekuri/jsonschema/v5"
 _ "go.uber.org/fx"
 _ "go.uber.org/zap"
 _ "github.com/prometheus/client_golang/prometheus"
 _ "github.com/prometheus/client_golang/prometheus/promhttp"
 _ "github.com/fsnotify/fsnotify"
 _ "github.com/google/btree"
 _ "github.com/google/go-cmp/cmp"
 _ "golang.org/x/sys/unix"
 _ "modernc.org/sqlite"
 _ "github.com/chromedp/chromedp"
)
func main(){}
