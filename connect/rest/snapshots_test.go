package rest_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/sources/snapshot"
)

// snapSource is a source with incremental snapshots over the shared engine, whose tables are
// made up: the API's requests are validated and stored like a real source's.
type snapSource struct{ e *snapshot.Engine }

func (s *snapSource) Open(ctx context.Context, after connect.Position) error {
	return s.e.Open(ctx, nil)
}
func (s *snapSource) Read(ctx context.Context) (connect.Batch, error) {
	<-ctx.Done()
	return connect.Batch{}, ctx.Err()
}
func (s *snapSource) Ack(context.Context, connect.Position) error { return nil }
func (s *snapSource) Close(context.Context) error                 { return nil }
func (s *snapSource) SnapshotSignal(ctx context.Context, origin, id, typ string, data []byte) ([]byte, error) {
	return s.e.Signal(ctx, typ, data, origin, id)
}
func (s *snapSource) SnapshotStatus() []byte { return s.e.StatusJSON() }

func snapPlugin() connect.Plugin {
	return connect.Plugin{
		Name: "snapsrc", Kind: connect.KindSource, Version: "1",
		Config: connect.ConfigDef{{Name: "topic.prefix", Type: connect.TypeString, Default: "x", HasDefault: true}},
		NewSource: func(cfg connect.Config, env connect.Env) (connect.Source, error) {
			tables := func(context.Context) ([]snapshot.Table, error) {
				return []snapshot.Table{{ID: "public.orders", Key: []string{"id"}}, {ID: "public.logs"}}, nil
			}
			return &snapSource{e: snapshot.New(snapshot.Options{Connector: env.Connector, Store: env.Store, Tables: tables})}, nil
		},
	}
}

func TestSnapshotEndpoints(t *testing.T) {
	e := newEnv(t, envOptions{plugins: []connect.Plugin{snapPlugin()}})
	if r := e.do("POST", "/connectors", `{"name":"src","config":{"connector.class":"snapsrc"}}`); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	e.waitTask("src", "RUNNING")
	waitSourceOpen(t, e, "src")

	r := e.do("POST", "/connectors/src/snapshots", `{"data-collections":["public\\.orders"],"additional-conditions":[{"data-collection":"public.orders","filter":"region = 'eu'"}]}`)
	if r.status != http.StatusAccepted || r.header.Get("Location") != "/connectors/src/snapshots" {
		t.Fatalf("POST: %d %s %v", r.status, r.body, r.header)
	}
	st := r.obj(t)
	tables, _ := st["tables"].([]any)
	if st["name"] != "src" || len(tables) != 1 {
		t.Fatalf("POST answer: %s", r.body)
	}
	tb := tables[0].(map[string]any)
	if tb["table"] != "public.orders" || tb["state"] != "PENDING" || tb["filter"] != "region = 'eu'" {
		t.Fatalf("POST answer's table: %v", tb)
	}
	if r := e.do("GET", "/connectors/src/snapshots", ""); r.status != http.StatusOK || r.obj(t)["name"] != "src" {
		t.Fatalf("GET: %d %s", r.status, r.body)
	}
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/connectors/src/snapshots/pause", ""},
		{"PUT", "/connectors/src/snapshots/resume", ""},
		{"DELETE", "/connectors/src/snapshots", `{"data-collections":["public.orders"]}`},
		{"DELETE", "/connectors/src/snapshots", ""},
	} {
		if r := e.do(c.method, c.path, c.body); r.status != http.StatusAccepted {
			t.Fatalf("%s %s: %d %s", c.method, c.path, r.status, r.body)
		}
	}

	// errors
	for _, c := range []struct {
		method, path, body string
		status             int
		msg                string
	}{
		{"POST", "/connectors/src/snapshots", `{"data-collections":["public.nope"]}`, 400, `invalid snapshot request: data-collections[0]: "public.nope" matches no captured table (captured: public.logs, public.orders)`},
		{"POST", "/connectors/src/snapshots", `{"data-collections":["public.logs"]}`, 400, "table public.logs has no primary key: set message.key.columns for it"},
		{"POST", "/connectors/src/snapshots", `{"data-collections":["public.orders"],"chunk-sise":5}`, 400, `unknown field "chunk-sise"; did you mean "chunk-size"?`},
		{"POST", "/connectors/src/snapshots", `[1]`, 400, "request body must be a JSON object (got an array)"},
		{"POST", "/connectors/src/snapshots", ``, 400, "request body is empty"},
		{"PUT", "/connectors/src/snapshots/pause", `"x"`, 400, "request body must be a JSON object"},
		{"POST", "/connectors/nope/snapshots", `{}`, 404, "nope not found"},
		{"GET", "/connectors/nope/snapshots", ``, 404, "nope not found"},
	} {
		r := e.do(c.method, c.path, c.body)
		msg, _ := r.obj(t)["message"].(string)
		if r.status != c.status || !strings.Contains(msg, c.msg) {
			t.Errorf("%s %s %s: %d %q; want %d containing %q", c.method, c.path, c.body, r.status, msg, c.status, c.msg)
		}
	}

	// a source without snapshots, and a stopped connector
	if r := e.do("POST", "/connectors", datagenJSON("gen", "")); r.status != http.StatusCreated {
		t.Fatalf("create gen: %d %s", r.status, r.body)
	}
	e.waitTask("gen", "RUNNING")
	waitSourceOpen(t, e, "gen")
	if r := e.do("GET", "/connectors/gen/snapshots", ""); r.status != 400 || !strings.Contains(string(r.body), "does not support incremental snapshots") {
		t.Fatalf("datagen: %d %s", r.status, r.body)
	}
	if r := e.do("PUT", "/connectors/src/stop", ""); r.status != http.StatusNoContent {
		t.Fatalf("stop: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/connectors/src/snapshots", ""); r.status != 409 || !strings.Contains(string(r.body), "is STOPPED") {
		t.Fatalf("stopped: %d %s", r.status, r.body)
	}
}

// waitSourceOpen waits until the snapshot API of a source stops answering that it is starting:
// the task is RUNNING before its source is open.
func waitSourceOpen(t *testing.T, e *env, name string) {
	t.Helper()
	waitFor(t, name+"'s source to be open", func() bool {
		r := e.do("GET", "/connectors/"+name+"/snapshots", "")
		return r.status != http.StatusConflict || !strings.Contains(string(r.body), "is starting")
	})
}
