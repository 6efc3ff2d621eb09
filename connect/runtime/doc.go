// Package runtime runs connectors: each connector is one supervised task that moves records
// between its plugin and the log.
//
// A source task reads batches, applies the connector's transforms and appends each batch's
// records to their topic partitions (created on first use); only after a batch and every
// earlier one are durable does it commit the batch's position (at most every
// offset.flush.interval.ms) and then acknowledge it to the source. Every append carries the
// encoded Position of its last record, so after a crash the task drops the records the source
// replays that the log already holds: each record reaches the log exactly once, even if the
// crash fell between the appends of one batch (see source.go).
//
// A sink task consumes its topics as the consumer group "connect-<name>", applies the
// transforms, writes to the sink and commits the group's offsets only after the write
// returned: at least once, in order per partition (see sink.go).
//
// Records that cannot be decoded, or that a transform or the sink rejects, fail the task under
// errors.tolerance=none and go to the dead-letter topic (with __connect.errors.* headers) under
// errors.tolerance=all. Retriable task errors restart the task with exponential backoff;
// permanent ones leave it FAILED with a trace that names the fix.
//
// Once Restore ran, connector states are durable (manage.go): connectors created through the
// API (Create, Put) are stored in the compacted topic __sluice_connect_configs and added again
// at the next start; connectors of pipeline files are applied from the files at every start
// and keep only their target state (paused, stopped) and offsets generation there.
//
// Offsets of a STOPPED connector can be altered and reset (alter.go). A source whose offset
// changed appends under a new producer (an offsets generation), so that the records it reads
// again are appended rather than dropped as replays. WaitFor (wait.go) blocks until a sink's
// view includes a source position (read-your-writes); Rebuild (rebuild.go) drives a sink's
// connect.Rebuilder while the live task keeps writing.
//
// The runtime reaches the log through the small Log interface; runtimetest.Log implements it
// in memory. Connector configurations are validated by Check against one definition: the
// runtime-level keys of DefFor merged with the plugin's own.
//
//	rt, err := runtime.New(runtime.Options{Log: log, Registry: reg, Logger: logger})
//	err = rt.Add(runtime.ConnectorSpec{Name: "gen", Class: "datagen", Config: cfg})
//	err = rt.Run(ctx) // until ctx is cancelled, then a graceful stop
package runtime
