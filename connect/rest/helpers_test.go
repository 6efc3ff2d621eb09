package rest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/rest"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/connect/runtime/runtimetest"
	"github.com/sluice-cdc/sluice/sinks/file"
	"github.com/sluice-cdc/sluice/sources/datagen"
	"github.com/sluice-cdc/sluice/sources/mysql"
	"github.com/sluice-cdc/sluice/transforms"
)

// syncBuffer collects log output from several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// env is a running runtime behind the API, over an in-memory log.
type env struct {
	t      *testing.T
	rt     *runtime.Runtime
	log    *runtimetest.Log
	ts     *httptest.Server
	token  string
	logs   *syncBuffer
	sink   *runtimetest.Sink
	levels *rest.Levels
}

type envOptions struct {
	plugins []connect.Plugin // more plugins
	token   string
	environ map[string]string // for ${env:...}
	prepare func(rt *runtime.Runtime)
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	logs := &syncBuffer{}
	var out io.Writer = logs
	if os.Getenv("SLUICE_TEST_LOG") != "" {
		out = io.MultiWriter(logs, os.Stderr)
	}
	levels := rest.NewLevels(slog.LevelDebug)
	logger := slog.New(levels.Handler(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug - 4})))
	sink := runtimetest.NewSink()
	plugins := []connect.Plugin{datagen.Plugin(), file.Plugin(), mysql.Plugin(), sink.Plugin("mem")}
	plugins = append(plugins, o.plugins...)
	reg, err := connect.NewRegistry(append(plugins, transforms.Plugins()...)...)
	if err != nil {
		t.Fatal(err)
	}
	lookup := func(name string) (string, bool) {
		v, ok := o.environ[name]
		return v, ok
	}
	resolve := func(cfg map[string]string) (map[string]string, []connect.FieldError) {
		return config.ResolveConfig(cfg, lookup)
	}
	log := runtimetest.NewLog()
	metrics := rest.NewMetrics()
	rt, err := runtime.New(runtime.Options{
		Log: log, Registry: reg, Logger: logger.With("component", "runtime"),
		Chain: func(reg *connect.Registry, cfg map[string]string) (connect.Transform, []connect.FieldError) {
			ch, errs := transforms.BuildChain(reg, cfg)
			if ch == nil {
				return nil, errs
			}
			return ch, errs
		},
		InitialBackoff: 50 * time.Millisecond, TopicRefresh: 20 * time.Millisecond,
		FetchWait: 50 * time.Millisecond, ShutdownTimeout: 10 * time.Second,
		Resolve: resolve, Observer: metrics, WorkerID: "test-worker",
	})
	if err != nil {
		t.Fatal(err)
	}
	metrics.Attach(rt)
	if o.prepare != nil {
		o.prepare(rt)
	}
	if err := rt.Restore(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv, err := rest.New(rest.Options{
		Runtime: rt, Token: o.token, Resolve: resolve, Logger: logger.With("component", "rest"),
		Levels: levels, Metrics: metrics, Version: "9.9.9", Commit: "abc", ClusterID: "cluster-1",
		MaxBodyBytes: 64 << 10, MaxWait: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	t.Cleanup(func() {
		ts.Close()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("runtime: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("runtime did not stop within 20s")
		}
	})
	return &env{t: t, rt: rt, log: log, ts: ts, token: o.token, logs: logs, sink: sink, levels: levels}
}

// response is one answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("answer %d is not JSON: %v\n%s", r.status, err, r.body)
	}
	return v
}

func (r response) obj(t *testing.T) map[string]any {
	t.Helper()
	m, ok := r.json(t).(map[string]any)
	if !ok {
		t.Fatalf("answer is not an object: %s", r.body)
	}
	return m
}

// do sends a request with the env's token (if any) and a JSON body (when body != "").
func (e *env) do(method, path, body string, hdr ...string) response {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.ts.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// waitTask polls the status until the connector's first task has the state.
func (e *env) waitTask(name, state string) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := e.rt.Status(name)
		if err == nil && len(st.Tasks) > 0 && string(st.Tasks[0].State) == state {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("connector %s: status %+v, %v; want task %s", name, st, err, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// datagenJSON is a POST /connectors body of a datagen source.
func datagenJSON(name string, extra string) string {
	cfg := `"connector.class":"datagen","topic.prefix":"` + name + `","datagen.rate":"200","datagen.keys":"20","offset.flush.interval.ms":"0"`
	if extra != "" {
		cfg += "," + extra
	}
	return `{"name":"` + name + `","config":{` + cfg + `}}`
}
