package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/taskhoster/taskhoster/adapters/httpapi"
)

// jsonLogger logs JSON lines from level on into w, sampled as the
// server's logger is (the first 100 lines of a message a second, then
// every 100th).
func jsonLogger(w io.Writer, level zapcore.Level) *zap.Logger {
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	core := zapcore.NewCore(enc, zapcore.AddSync(w), level)
	return zap.New(zapcore.NewSamplerWithOptions(core, time.Second, 100, 100))
}

var teapot = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusTeapot)
	_, _ = w.Write([]byte("short and stout"))
})

// A request line is written at debug level only, with the path but not
// the query, the status and the bytes written.
func TestRequestLogAtDebugOnly(t *testing.T) {
	for _, level := range []zapcore.Level{zapcore.InfoLevel, zapcore.DebugLevel} {
		var out bytes.Buffer
		h := httpapi.RequestLog(jsonLogger(&out, level))(teapot)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/q/work?access_token=secret", nil))
		if rec.Code != http.StatusTeapot || rec.Body.String() != "short and stout" {
			t.Errorf("%v: the handler's answer was changed: %d %q", level, rec.Code, rec.Body)
		}
		if level == zapcore.InfoLevel {
			if out.Len() != 0 {
				t.Errorf("info: logged %s", out.String())
			}
			continue
		}
		var line struct {
			Level, Msg, Method, Path string
			Status, Bytes            int
		}
		if err := json.Unmarshal(out.Bytes(), &line); err != nil {
			t.Fatalf("debug: %v: %q", err, out.String())
		}
		if line.Level != "debug" || line.Msg != "request" || line.Path != "/q/work" || line.Status != 418 || line.Bytes != 15 ||
			bytes.Contains(out.Bytes(), []byte("secret")) {
			t.Errorf("debug: logged %s", out.String())
		}
	}
}

// BenchmarkRequestLog is the CPU one request's line costs: "off" is the
// default (--log-level info), "on" --log-level debug, whose lines are
// sampled after the first 100 a second, as the server's are; "unsampled"
// writes every line.
func BenchmarkRequestLog(b *testing.B) {
	unsampled := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zapcore.DebugLevel))
	for _, c := range []struct {
		name   string
		logger *zap.Logger
	}{
		{"off", jsonLogger(io.Discard, zapcore.InfoLevel)},
		{"on", jsonLogger(io.Discard, zapcore.DebugLevel)},
		{"unsampled", unsampled},
	} {
		b.Run(c.name, func(b *testing.B) {
			h := httpapi.RequestLog(c.logger)(teapot)
			r := httptest.NewRequest("POST", "/resize/0123456789abcdef/result", nil)
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, r)
			}
		})
	}
}
