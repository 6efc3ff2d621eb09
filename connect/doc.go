// Package connect is sluice's contract: the record that flows from sources through the log to
// sinks, the Debezium-compatible change event it usually carries, source positions, the
// Source / Sink / Transform / Predicate interfaces, plugin configuration definitions and the
// error classes the runtime's retry loop understands.
//
// It imports only the standard library, so every plugin can depend on it and on nothing else.
//
// # Data model
//
// A [Record] carries a key and a value. Both are values of the small dynamic data model shared by
// every part of sluice (the JSON data model, with ordered objects):
//
//	nil                 JSON null (a nil Value is a tombstone)
//	bool                true / false
//	int64, uint64       integers (uint64 only beyond the int64 range, e.g. BIGINT UNSIGNED)
//	float64             other numbers (NaN and ±Inf render as the strings "NaN", "Infinity", "-Infinity")
//	string              text, and exact decimals in decimal.handling.mode=precise|string
//	[]byte              binary data; renders as base64 (Kafka Connect's JSON rendering of bytes)
//	Row                 an object whose field order is kept (composite keys keep column order)
//	[]any               an array of values
//
// Sources produce a change event as a Row (see [ChangeEvent.Row]):
//
//	{"before": {...}|null, "after": {...}|null, "source": {...}, "op": "c|u|d|r|t", "ts_ms": N}
//
// followed, for a delete, by a tombstone: the same key and a nil value. When the connector has
// no transforms ([Env].RawJSON), a source may hand over a key or value already rendered as JSON
// ([RawJSON], e.g. the snapshots' rows, rendered from the server's values); the runtime stores
// that text as it is. It would parse it before any transform or predicate saw the record, so
// they only meet the types above. Transforms may reshape the
// value into anything of the data model (for example a flat row after "unwrap"). The record's
// [Record.Version] and the [HeaderUnchanged] header survive every transform, so sinks can refuse
// stale writes and do partial updates whatever the value's shape.
//
// # Lifecycle
//
// The runtime drives a source as Open → (Read → append to the log → Ack)* → Close and a sink as
// Open → (Write → commit consumer offsets)* → Close. No method of one instance is called
// concurrently with another method of that instance, unless its comment says so.
//
// # Errors
//
// Errors are retriable unless marked with [Permanent]: the runtime restarts a task that returns a
// retriable error with exponential backoff, and fails it (state FAILED, with the message) on a
// permanent one. A sink reports per-record rejections with a [*WriteError]; those records go to
// the dead-letter topic per errors.tolerance while the rest of the batch counts as written.
//
// Example, a minimal source:
//
//	type counter struct{ n int64 }
//
//	func (c *counter) Open(ctx context.Context, after connect.Position) error { return nil }
//	func (c *counter) Read(ctx context.Context) (connect.Batch, error) {
//		c.n++
//		ev := connect.ChangeEvent{Op: connect.OpCreate, After: connect.Row{{Name: "id", Value: c.n}}}
//		pos := connect.Position{Order: binary.BigEndian.AppendUint64(nil, uint64(c.n))}
//		rec := connect.Record{Topic: "demo.t", Key: connect.Row{{Name: "id", Value: c.n}}, Value: ev.Row(), Position: pos}
//		return connect.Batch{Records: []connect.Record{rec}, Position: pos}, nil
//	}
//	func (c *counter) Ack(ctx context.Context, upTo connect.Position) error { return nil }
//	func (c *counter) Close(ctx context.Context) error                      { return nil }
package connect
