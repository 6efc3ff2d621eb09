// Package transforms holds sluice's single-message transforms and predicates, configured with
// Kafka Connect's keys and compatible with Kafka Connect's and Debezium's namesakes, and the
// chain builder that the runtime uses on both sides of the log (source side: before records
// are appended; sink side: after they are read, so each view can shape a topic its own way).
//
// # Contract
//
// Every transform is a [connect.Transform]: pure (no I/O, no clock but the record's own
// timestamp, no state that changes its result), safe for concurrent use, and it never modifies
// its input's Key, Value or Headers in place: it builds new rows where it changes them and
// shares what it leaves alone. An error is a per-record failure that the runtime routes by
// errors.tolerance. A [Chain] additionally keeps every record's Version and "__sluice."
// headers ([connect.HeaderVersion], [connect.HeaderUnchanged]) whatever its transforms do, so
// sinks can refuse stale writes and keep columns the source did not deliver.
//
// Kafka Connect's "$Key" / "$Value" variants are two plugins: the short name works on the value
// (replace_field = ReplaceField$Value) and the name with "_key" on the key
// (replace_field_key = ReplaceField$Key). Kafka Connect's Filter, which drops everything its
// predicate selects, is "drop"; "filter" is Debezium's expression filter.
//
// # Deletes after unwrap
//
// unwrap keeps Debezium's semantics exactly: depending on delete.tombstone.handling.mode a
// delete becomes a tombstone (null value, same key) or, in the rewrite modes, its before row
// with the field __deleted = "true" (and every other row gets __deleted = "false"). Sinks treat
// a tombstone, or a row whose __deleted is "true", as a delete of the key; Record.Version is
// untouched, so versions still guard.
//
// # Example
//
//	reg, _ := connect.NewRegistry(transforms.Plugins()...)
//	chain, errs := transforms.BuildChain(reg, map[string]string{
//		"transforms":                                   "unwrap,route",
//		"transforms.unwrap.type":                       "io.debezium.transforms.ExtractNewRecordState",
//		"transforms.unwrap.delete.tombstone.handling.mode": "rewrite",
//		"transforms.route.type":                        "org.apache.kafka.connect.transforms.RegexRouter",
//		"transforms.route.regex":                       "([^.]+)\\.([^.]+)\\.([^.]+)",
//		"transforms.route.replacement":                 "$3",
//	})
//	out, keep, err := chain.Apply(rec)
package transforms
