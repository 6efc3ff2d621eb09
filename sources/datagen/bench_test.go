package datagen

import (
	"testing"

	"github.com/sluice-cdc/sluice/connect"
)

// BenchmarkRecords measures generating one event as the source does (a new batchMem per
// batch of 100 events).
func BenchmarkRecords(b *testing.B) {
	g := newGen(Settings{Prefix: "b", Database: "inventory", Tables: Tables, Keys: 1000, Seed: 1, Tombstones: true})
	recs := make([]connect.Record, 0, 2)
	b.ReportAllocs()
	var mem *batchMem
	for i := 0; i < b.N; i++ {
		if i%100 == 0 {
			mem = &batchMem{slab: connect.Slab{N: 200}}
		}
		recs = g.appendRecords(recs[:0], mem, int64(i))
	}
}
