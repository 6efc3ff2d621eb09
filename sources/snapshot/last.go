package snapshot

import (
	"bytes"

	"github.com/sluice-cdc/sluice/connect"
)

// MarkLast sets source.snapshot to "last" in the value of an initial snapshot's last record, a
// change event as a Row or rendered (connect.RawJSON). A Row's source block is shared by the
// records of its table, so the record gets a copy of its own. A rendering is the record's own
// and changes in place: its source block comes after the row image and holds
// "snapshot":"true", so the last such text in it is the block's (a value's text cannot hold it
// unescaped; the block must say "true", as the initial snapshots' do). Parsing the rendering
// back would not do: a number such as -0 would lose its sign.
func MarkLast(r *connect.Record) {
	switch v := r.Value.(type) {
	case connect.RawJSON:
		const mark = `"snapshot":"`
		if i := bytes.LastIndex(v, []byte(mark+`true"`)); i >= 0 {
			copy(v[i+len(mark):], "last")
		}
	case connect.Row:
		i := v.Index(connect.FieldSource)
		if i < 0 {
			return
		}
		src, ok := v[i].Value.(connect.Row)
		if !ok {
			return
		}
		own := src.Clone()
		if j := own.Index("snapshot"); j >= 0 {
			own[j].Value = "last"
		}
		env := append(connect.Row(nil), v...)
		env[i].Value = own
		r.Value = env
	}
}
