// Package change is what a record means to a view, shared by the Elasticsearch and Redis
// sinks so that both apply the same rules and give a row the same id:
//
//   - Interpret reads a record as DESIGN.md §2 and the unwrap transform define it: a tombstone
//     or a change event with op d deletes, op c, u and r write the after image, op t is
//     skipped, and a flat row is written unless its __deleted field is "true";
//   - AppendKey renders a record key as a document id (the ${key} of templates); the
//     rendering is part of every view's format and must never change;
//   - Template is a name template with ${...} placeholders (index names, Redis keys).
//
// Example:
//
//	ch, err := change.Interpret(&rec)
//	if err == nil && ch.Kind == change.Write {
//		id, err := change.AppendKey(nil, rec.Key)
//		...
//	}
package change
