// Package snapshot is the logic of incremental and blocking snapshots that the PostgreSQL
// and MySQL sources share: reading tables chunk by chunk while the change stream goes on, as
// Netflix's DBLog and Debezium do, without locks and without writing to the source's tables.
//
// The Engine owns everything but the server: the queue of tables and its commands (from the
// admin API, the signal topic, the signal table, or a capture filter that grew), stored in
// the connector's store before they are acknowledged and applied in order; the watermark
// windows of the chunks being read and their de-duplication against the stream; the Orders of
// the records it emits between two transactions of the stream (order.go); the gate that emits
// a chunk only once the previous one is acknowledged, so that a crash reads at most one chunk
// again; throttling (rows per second, the stream's lag); progress, metrics and Debezium's
// notifications. Its state is part of every position the source emits (state.go), so a
// restarted source goes on after the last chunk the log holds.
//
// The contract with a source, for each window:
//
//   - Read the chunk at a boundary between two transactions, before processing any further
//     transaction, in a consistent read: Window.High is a stream position before which every
//     transaction the read saw committed; Window.Low one at or after which a transaction may
//     be missing from the read; Window.Invisible the transactions the read did not see
//     wherever they are (PostgreSQL: its MVCC snapshot). A transaction the source already
//     processed that the read does not see makes the read worthless: read again.
//   - Report every row change of a watched table with Touch (its chunk key, its transaction's
//     stream position and id): the engine drops the row from the chunk if the read may not
//     include the change.
//   - Emit the rows Emission.Keep keeps when Begin says so (the stream has passed High), with
//     the Positions Emission.Next gives, then Emission.Done; put State() into every batch's
//     State and give the engine every acknowledged Order (Acked).
//
// Under these rules the records of a table, folded in log order, equal the table once the
// stream has passed the snapshot's end (sim_test.go checks it against a simulated database
// with visibility races, key changes, late acknowledgements and kills).
//
// Example, in a source's Read at a transaction boundary:
//
//	step := s.incr.Begin(s.streamOrder(), s.frontier())
//	switch step.Kind {
//	case snapshot.StepOpen:
//		for _, t := range step.Tasks {
//			rows, low, high := s.readChunk(t) // consistent read of the next rows after t.After
//			s.incr.Opened(&snapshot.Window{Task: t, Low: low, High: high, Data: rows})
//		}
//	case snapshot.StepEmit:
//		em := s.incr.StartEmit(step.Window, s.streamOrder(), s.frontier())
//		...
//	}
package snapshot
