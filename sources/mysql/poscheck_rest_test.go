package mysql_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/rest"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/connect/runtime/runtimetest"
	"github.com/sluice-cdc/sluice/e2e/harness"
	"github.com/sluice-cdc/sluice/sources/mysql"
)

// TestAlterOffsetCheckedByServer: PATCH /connectors/{c}/offsets of a stopped mysql connector
// asks the server: a binlog file it has not written is a 400 naming the newest file, and the
// stored offset stays; a position it has is stored and shown.
func TestAlterOffsetCheckedByServer(t *testing.T) {
	m := harness.NewMariaDB(t, harness.MariaDBOptions{})
	c, err := client.Connect(m.Addr(), m.AppUser, m.AppPassword, m.Database)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Execute("SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	file, _ := r.GetString(0, 0)
	size, _ := r.GetUint(0, 1)
	ahead := file[:strings.LastIndexByte(file, '.')] + ".000099"

	reg, err := connect.NewRegistry(mysql.Plugin())
	if err != nil {
		t.Fatal(err)
	}
	rt, err := runtime.New(runtime.Options{Log: runtimetest.NewLog(), Registry: reg, ShutdownTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := rt.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	srv, err := rest.New(rest.Options{Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	defer func() {
		ts.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runtime: %v", err)
		}
	}()
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	cfg, _ := json.Marshal(map[string]string{
		"connector.class": "mysql", "database.hostname": m.Host, "database.port": strconv.Itoa(m.Port),
		"database.user": m.ReplUser, "database.password": m.ReplPassword, "database.server.id": "4242",
		"topic.prefix": "inv", "database.include.list": m.Database,
	})
	if st, body := do("POST", "/connectors", `{"name":"inv","initial_state":"STOPPED","config":`+string(cfg)+`}`); st != 201 {
		t.Fatalf("create: %d %s", st, body)
	}
	_, before := do("GET", "/connectors/inv/offsets", "")

	st, body := do("PATCH", "/connectors/inv/offsets", fmt.Sprintf(`{"offsets":[{"partition":{"server":"inv"},"offset":{"file":%q,"pos":4}}]}`, ahead))
	var e struct {
		Code    int    `json:"error_code"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal([]byte(body), &e)
	want := fmt.Sprintf("offset: binlog %s is not on the server yet (ahead of it); the newest is %s, %d bytes: give a position the server has written", ahead, file, size)
	if st != 400 || e.Code != 400 || e.Message != want {
		t.Errorf("PATCH of a file not written yet: %d %s\nwant 400 %q", st, body, want)
	}
	if _, after := do("GET", "/connectors/inv/offsets", ""); after != before {
		t.Errorf("offsets after a refused PATCH: %s, want unchanged %s", after, before)
	}

	if st, body := do("PATCH", "/connectors/inv/offsets", fmt.Sprintf(`{"offsets":[{"partition":{"server":"inv"},"offset":{"file":%q,"pos":%d}}]}`, file, size)); st != 200 {
		t.Fatalf("PATCH of the binlog's end: %d %s", st, body)
	}
	if _, after := do("GET", "/connectors/inv/offsets", ""); !strings.Contains(after, fmt.Sprintf(`"file":%q,"pos":%d`, file, size)) {
		t.Errorf("offsets after the PATCH: %s, want file %s pos %d", after, file, size)
	}
}
