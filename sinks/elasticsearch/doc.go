// Package elasticsearch is the Elasticsearch sink: it keeps indices equal to the rows of the
// source tables, from the change events of the log.
//
// Contract (see the README section for every key):
//
//   - The document id is the record key (change.AppendKey: one column renders as its value, a
//     composite key as its values joined by ':' with '\' and ':' escaped). The index is the
//     `index` template's rendering (default: the topic), in lower case.
//   - A change event with op c, u or r indexes its after image; op d, a tombstone, and a flat row
//     whose __deleted is "true" delete the document; op t is skipped.
//   - Every write and delete carries the record's version with version_type=external_gte, so a
//     replayed or reordered older event never overwrites a newer one, and a delete is not
//     undone by a late write for as long as Elasticsearch keeps the delete's version
//     (index.gc_deletes, 60 s by default). Refusals of stale writes are counted (Stats), not
//     errors. Records without a version (0) are written unguarded.
//   - Columns listed in the __sluice.unchanged header keep their stored value: the stored
//     document is read and the write carries it merged (see merge.go).
//   - Write returns once every item is settled; 429 and 5xx items are retried with backoff and
//     jitter, other refusals are rejections handled by behavior.on.malformed.documents.
//   - Indices are created as <name>_v<n> behind the alias <name>; a rebuild (connect.Rebuilder)
//     builds <name>_v<n+1> and swaps the alias atomically.
//
// Example (the runtime does this):
//
//	p := elasticsearch.Plugin()
//	cfg, errs := p.ParseConfig(map[string]string{"connection.url": "http://127.0.0.1:9200"})
//	sink, err := p.NewSink(cfg, connect.Env{Connector: "orders-view"})
//	err = sink.Open(ctx)
//	err = sink.Write(ctx, records)
package elasticsearch
