package rest_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/sources/datagen"
)

// refusingSource is a datagen source that refuses every offset alteration, as a source whose
// server no longer has the position does.
type refusingSource struct{ connect.Source }

func (refusingSource) CheckPosition(context.Context, connect.Position) error {
	return errors.New("binlog file mariadb-bin.000001 is no longer on the server (oldest: mariadb-bin.000007)")
}

// An offset the source refuses is a 400 naming the reason; the stored offset is unchanged.
func TestAlterOffsetRefusedBySource(t *testing.T) {
	p := datagen.Plugin()
	inner := p.NewSource
	p.Name, p.NewSource = "refusing", func(cfg connect.Config, env connect.Env) (connect.Source, error) {
		src, err := inner(cfg, env)
		return refusingSource{src}, err
	}
	e := newEnv(t, envOptions{plugins: []connect.Plugin{p}})
	body := `{"name":"gen","initial_state":"STOPPED","config":{"connector.class":"refusing","topic.prefix":"gen"}}`
	if r := e.do("POST", "/connectors", body); r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	before := e.do("GET", "/connectors/gen/offsets", "")
	r := e.do("PATCH", "/connectors/gen/offsets", `{"offsets":[{"partition":{"server":"gen"},"offset":{"v":1,"next":10}}]}`)
	if r.status != 400 {
		t.Fatalf("PATCH: %d %s, want 400", r.status, r.body)
	}
	if msg, _ := r.obj(t)["message"].(string); msg != "offset: binlog file mariadb-bin.000001 is no longer on the server (oldest: mariadb-bin.000007)" {
		t.Fatalf("message %q", msg)
	}
	after := e.do("GET", "/connectors/gen/offsets", "")
	if after.status != 200 || string(after.body) != string(before.body) || strings.Contains(string(after.body), `"next":10`) {
		t.Fatalf("offsets after a refused PATCH: %d %s, want unchanged %s", after.status, after.body, before.body)
	}
}
