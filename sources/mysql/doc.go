// Package mysql is the MySQL / MariaDB source: a consistent initial snapshot handed over to
// the binlog stream, as Debezium change events, exactly once into the log.
//
// Open checks the server (binlog on, ROW format, FULL row image and metadata, grants, server id;
// see preflight.go) and then, as the stored position and snapshot.mode say, starts or resumes
// the snapshot (snapshot.go) or the binlog stream (stream.go). Read returns bounded batches:
// snapshot rows read in chunks of snapshot.fetch.size, at most max.batch.size records at a time,
// a large transaction spread over several batches.
//
// Records are made ahead of Read, by goroutines that Open starts and Close stops: while
// streaming, go-mysql's binlog reader, which also decodes row images straight into record
// values (decode.go), and a producer that builds the batches (stream.go); during a snapshot, a
// fetcher running the chunk queries and converters building the batches (snapread.go). Records
// are cut from slabs a batch at a time (record.go, box.go), so that a record costs a few
// allocations per hundred records rather than a dozen of its own.
//
// # Records
//
// Topic <topic.prefix>.<database>.<table>; key the primary key columns (message.key.columns
// overrides); value the Debezium envelope with the MySQL source block (version, connector,
// name, ts_ms, snapshot, db, sequence, table, server_id, gtid, file, pos, row, thread, query).
// A delete is followed by a tombstone (tombstones.on.delete). DDL statements go to the topic
// <topic.prefix> as schema change events (include.schema.changes), TRUNCATE as op "t" events.
// Record.Version is (binlog file number << 32 | position of the transaction's first event);
// snapshot rows carry the consistent point of the snapshot transaction that read them.
//
// # Incremental snapshots
//
// While streaming, the source takes the incremental and blocking snapshots of sources/snapshot
// (incremental.go): the producer drives the engine at the boundaries between binlog
// transactions, reads chunks on connections of its own in consistent snapshots whose binlog
// position (MariaDB's binlog_snapshot_position) is the watermark, reports every row change of
// a table being read, and emits the chunk rows the stream did not overtake. The engine's state
// is part of every stream batch's position.
//
// # Positions
//
// See position.go for the layout of Order and State. Every record's position resumes right
// after it, inside a transaction if need be, so the runtime's replay filter makes each record
// reach the log once. The schema history and snapshot plans live in env.Store (history.go).
//
// Example pipeline entry:
//
//	connectors:
//	  - name: inventory
//	    class: io.debezium.connector.mysql.MySqlConnector
//	    config:
//	      database.hostname: db.example
//	      database.user: cdc
//	      database.password: ${env:CDC_PASSWORD}
//	      database.server.id: 5401
//	      topic.prefix: dbserver1
//	      table.include.list: inventory\..*
package mysql
