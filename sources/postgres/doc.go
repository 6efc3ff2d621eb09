// Package postgres is sluice's PostgreSQL source: it captures the row changes of one
// database through a logical replication slot and the built-in pgoutput plugin, and emits
// them as Debezium change events, one topic per table (<topic.prefix>.<schema>.<table>).
//
// # Lifecycle
//
// Open connects, runs the pre-flight checks (wal_level, the REPLICATION attribute, USAGE and
// SELECT on the captured tables, free slots and WAL senders, a key or replica identity on
// every captured table), creates or checks the publication, and then, depending on the
// stored position and snapshot.mode:
//
//   - no position: creates the slot with an exported snapshot and reads every captured table
//     in that snapshot (op "r"), then streams from the slot's consistent point;
//   - a snapshot position: goes on with the snapshot after the stored row, then streams;
//   - a stream position: streams from it, after checking that the slot still exists, has
//     not lost its WAL and has not been moved past it. Otherwise the position is lost: a
//     permanent error that says what to do, or, with snapshot.mode=when_needed, a new slot
//     and a new snapshot under a new epoch.
//
// After a crash during the snapshot, the snapshot goes on after the last stored row in a new
// REPEATABLE READ transaction, and the stream still starts at the slot's consistent point, so
// every change since then is replayed over the rows read later.
//
// Read returns bounded batches (max.batch.size); a transaction larger than that spans
// several batches, each ending with a position inside the transaction. With pgoutput
// protocol 2 the server streams large transactions while they run; their changes are
// spilled to a file until Stream Commit, and dropped on Stream Abort, so no transaction is
// ever held in memory.
//
// # Positions, versions and acknowledgements
//
// A record's Position (see position.go) orders records by epoch, phase (snapshot before
// stream), table and row key for the snapshot, and commit LSN and index in the transaction
// for the stream; resuming from it skips exactly the records before it, also in the middle of
// a transaction. A snapshot row's Order is its key, encoded so that byte order is the key's
// order (keyorder.go): a snapshot resumed after a crash reads a newer MVCC snapshot, in which
// rows may have come and gone, and still gives every row the Order it had before, so the
// runtime's replay rule writes each row once. Tables whose key types have no such encoding
// number their rows per attempt instead (the rows in flight at a crash are written again).
// Record.Version is the transaction's commit LSN (the slot's consistent point for snapshot
// rows): it is equal for the changes of one transaction and grows in commit order.
//
// The slot is told that a WAL position is flushed only when Ack says the log holds every
// record before it, so after any crash the server still has everything the log lacks. A
// receiver goroutine owns the replication connection: it answers keepalives at once and
// sends status updates every status.update.interval.ms even while the log is slow. When no
// transaction is in flight, the position moves to the server's WAL end in an empty batch;
// once the log stores it and Ack comes back, the slot moves there too, so an idle or fully
// filtered database does not pile up WAL. heartbeat.interval.ms adds pg_logical_emit_message
// heartbeats for servers whose other databases write while this one does not.
//
// # Values
//
// Both the snapshot and the stream read values in PostgreSQL's text form, decoded by one
// decoder per column type (types.go), so a row reads the same on both paths; the snapshot
// reads timestamptz columns outside its chunk key in binary form and decodes them to what
// their text gives (table.decodeBinary), which spares the server formatting them. An unchanged
// TOAST value of an update is left out of the after image and named in the record header
// connect.HeaderUnchanged: sinks keep the stored value. With REPLICA IDENTITY FULL the old row
// carries the value, and the after image holds it instead.
//
// # Connections
//
// The source keeps three connections: the replication stream, a catalog connection (type and
// key lookups, the snapshot transaction) and a monitor (slot lag, heartbeats). When the
// server goes away, Read reconnects with backoff (0.5 s doubling up to 30 s) and resumes
// after the last batch it returned; permanent faults (configuration, privileges, a lost
// position) are returned as connect.Permanent errors.
//
// Example configuration:
//
//	connectors:
//	  - name: inventory
//	    class: io.debezium.connector.postgresql.PostgresConnector
//	    config:
//	      database.hostname: db.internal
//	      database.user: cdc
//	      database.password: ${env:PGPASSWORD}
//	      database.dbname: inventory
//	      topic.prefix: pg
//	      slot.name: sluice_inventory
//	      table.include.list: public\.(customers|orders)
package postgres
