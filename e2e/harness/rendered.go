package harness

import (
	"regexp"
	"testing"

	"github.com/sluice-cdc/sluice/connect"
)

// CheckRendered fails t unless each key or value of r that the source rendered itself
// (connect.RawJSON) is byte for byte what connect.AppendJSON makes of the value it parses to:
// the rendering the log stores is the one a Row of the same values would have had. A number
// -0 counts as 0, which it parses to (a rendering keeps a float's sign).
func CheckRendered(t testing.TB, r connect.Record) {
	t.Helper()
	if err := checkRendered(r); err != "" {
		t.Fatalf("record of %s: %s", r.Topic, err)
	}
}

func checkRendered(r connect.Record) string {
	for _, v := range []any{r.Key, r.Value} {
		raw, ok := v.(connect.RawJSON)
		if !ok {
			continue
		}
		x, err := connect.Materialize(raw)
		if err != nil {
			return "rendered JSON " + string(raw) + ": " + err.Error()
		}
		if x == nil {
			return "rendered JSON null"
		}
		again, err := connect.AppendJSON(nil, x)
		if err != nil || string(again) != ZeroSigns(string(raw)) {
			return "rendered\n " + string(raw) + "\nbut its value renders\n " + string(again)
		}
	}
	return ""
}

// negZero matches a number -0 (and what precedes and follows it).
var negZero = regexp.MustCompile(`([:,\[])-0([,\]}])`)

// ZeroSigns replaces every number -0 in a JSON text by 0 (twice: neighbours share a comma).
func ZeroSigns(s string) string {
	return negZero.ReplaceAllString(negZero.ReplaceAllString(s, "${1}0${2}"), "${1}0${2}")
}
