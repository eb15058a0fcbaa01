package httpapi

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5/middleware"
	"go.uber.org/zap"
)

// RequestLog logs one line per request at debug level: at thousands of
// tasks a second the lines cost throughput, so a server logs them only
// when asked to (serve --log-level debug); otherwise the request is served
// unwrapped. It logs the path without its query string (a WebSocket's
// ?access_token= must never reach a log) and never a header or a body.
func RequestLog(logger *zap.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !logger.Core().Enabled(zap.DebugLevel) {
				next.ServeHTTP(w, r)
				return
			}
			start := time.Now()
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r)
			logger.Debug("request",
				zap.String("method", r.Method),
				zap.String("host", r.Host),
				zap.String("path", r.URL.Path),
				zap.Int("status", ww.Status()),
				zap.Int("bytes", ww.BytesWritten()),
				zap.Duration("duration", time.Since(start)),
				zap.String("remote", r.RemoteAddr),
			)
		})
	}
}
