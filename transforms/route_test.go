package transforms

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// A transform keeps no part of a record once Apply returns: the runtime lets a source write a
// batch's memory again once the batch is encoded (connect.Batch.Release), and a topic may live
// in that memory (content_router and outbox take it from a value). The routers memoize topic
// names, so they must keep copies: here every record's topic is in the same bytes, rewritten
// before each Apply, as a recycling source rewrites a released batch.
func TestRoutersKeepNoRecordMemory(t *testing.T) {
	var names []string // of one length: the bytes of one can hold any other
	for i := range 30 {
		names = append(names, fmt.Sprintf("db.t%02d", i))
	}
	for _, tc := range []struct {
		typ  string
		opts map[string]string
	}{
		{"route", map[string]string{"regex": `db\.t(\d)(\d)`, "replacement": "out.$2$1"}},
		{"logical_table_router", map[string]string{"topic.regex": `db\.t(\d)(\d)`, "topic.replacement": "out.$2$1", "key.enforce.uniqueness": "false"}},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			c := single(t, tc.typ, tc.opts)
			mem := make([]byte, len(names[0]))
			r := rand.New(rand.NewPCG(1, 2))
			for i := range 3000 {
				name := names[r.IntN(len(names))]
				copy(mem, name)
				in := rec(nil, nil)
				in.Topic = unsafe.String(&mem[0], len(mem))
				out, keep, err := c.Apply(in)
				if want := "out." + name[5:6] + name[4:5]; err != nil || !keep || out.Topic != want {
					t.Fatalf("record %d of topic %s: routed to %q (keep %v, err %v), want %q", i, name, out.Topic, keep, err, want)
				}
			}
		})
	}
}
