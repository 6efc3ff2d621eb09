// Package redis is the Redis sink: it keeps a Redis keyspace equal to the rows of the source
// tables, from the change events of the log.
//
// Contract (see the README section for every key):
//
//   - A row is the key the redis.key template renders (default ${table}:${key}, where ${key} is
//     the record key rendered as in every view: one column as its value, a composite key as its
//     values joined by ':' with '\' and ':' escaped). redis.type hash stores one field per
//     non-null column, json the row as a JSON string; stream appends every change to a stream
//     per table.
//   - A change event with op c, u or r writes its after image; op d, a tombstone and a flat row
//     whose __deleted is "true" delete the key (stream: append the delete); op t is skipped.
//   - Every write is guarded by the record's version, kept in a marker key beside the row,
//     so a replayed or reordered older event never overwrites a newer one; a delete keeps its
//     marker for redis.delete.marker.ttl seconds so a late older write cannot bring the row
//     back. The sink decides against the markers it remembers or reads, and writes rows and
//     markers of batch.size records in one MULTI/EXEC transaction, fenced by the generation's
//     owner key (apply.go). Refusals are counted (Stats), not errors.
//   - Columns listed in __sluice.unchanged keep their stored value (hash: only the given fields
//     are set; json: the stored row is read and merged).
//   - A rebuild (connect.Rebuilder) writes a fresh generation under a prefix and switches the
//     pointer key <meta>live, which readers follow (see rebuild.go).
//
// Example (the runtime does this):
//
//	p := redis.Plugin()
//	cfg, errs := p.ParseConfig(map[string]string{"redis.uri": "redis://127.0.0.1:6379"})
//	sink, err := p.NewSink(cfg, connect.Env{Connector: "customers-cache"})
//	err = sink.Open(ctx)
//	err = sink.Write(ctx, records)
package redis
