package harness

import (
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/connect"
)

// checkRendered passes a canonical rendering (a -0 too) and names what is wrong with one that
// is not: a value rendered otherwise than its parse renders, bad JSON, JSON null.
func TestCheckRendered(t *testing.T) {
	for _, c := range []struct {
		key, value string
		want       string // a substring of the failure; "" for none
	}{
		{`{"id":1}`, `{"a":[-0,-0],"b":"x","c":-0.5}`, ""},
		{`{"id":1}`, `{"a": 1}`, "but its value renders\n {\"a\":1}"},
		{`{"id":01}`, `{"a":1}`, "rendered JSON {\"id\":01}"},
		{`{"id":1}`, `null`, "rendered JSON null"},
	} {
		r := connect.Record{Topic: "t", Key: connect.RawJSON(c.key), Value: connect.RawJSON(c.value)}
		got := checkRendered(r)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("key %s value %s: %q, want %q", c.key, c.value, got, c.want)
		}
	}
}
