package datagen

import (
	"testing"

	"github.com/sluice-cdc/sluice/connect"
)

// BenchmarkRecords measures generating one event as the source does.
func BenchmarkRecords(b *testing.B) {
	g := newGen(Settings{Prefix: "b", Database: "inventory", Tables: Tables, Keys: 1000, Seed: 1, Tombstones: true})
	recs := make([]connect.Record, 0, 2)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		recs = g.appendRecords(recs[:0], int64(i))
	}
}
