package connect

import (
	"fmt"
	"testing"
)

// BenchmarkRenderBatchMemo renders batches of change events as the runtime does (one JSONMemo,
// Reset per batch): 2048 inserts per batch, each with its own after-image of the benchmark
// tables' shape (id, v, s, timestamp) and a source block that is shared by a whole batch
// ("snapshot"), new for every event ("stream": single-row transactions), or shared by the rows
// of a 1000-row transaction with one row number in its 270-row events ("transaction", as in
// a MySQL binlog). Per op: one event.
func BenchmarkRenderBatchMemo(b *testing.B) {
	for _, name := range []string{"snapshot", "stream", "transaction"} {
		b.Run(name, func(b *testing.B) {
			const batch = 2048
			src := mysqlSource("true", 4, 0)
			var txBlocks []Row
			events := make([]any, batch)
			for i := range events {
				switch name {
				case "stream":
					src = mysqlSource("false", int64(1000+i*300), 0)
				case "transaction":
					if i%1000 == 0 {
						txBlocks = make([]Row, 270)
						for r := range txBlocks {
							txBlocks[r] = mysqlSource("false", int64(1000+i*300), int64(r))
						}
					}
					src = txBlocks[i%1000%270]
				}
				events[i] = Row{
					{FieldBefore, nil},
					{FieldAfter, Row{{"id", int64(100000 + i)}, {"v", int64(i % 1000)}, {"s", fmt.Sprintf("row %d", i)}, {"t", "2026-11-30T16:54:41.482432Z"}}},
					{FieldSource, src},
					{FieldOp, "c"},
					{FieldTsMs, int64(1796057681576)},
				}
			}
			var m JSONMemo
			buf := make([]byte, 0, 1<<20)
			n := 0
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if n == batch {
					m.Reset()
					buf, n = buf[:0], 0
				}
				var err error
				if buf, err = AppendJSONMemo(buf, events[n], &m); err != nil {
					b.Fatal(err)
				}
				n++
			}
		})
	}
}
