// Package waltest helps tests of packages built on wal: a log on an
// in-memory file system that can be reopened cleanly or after a simulated
// crash.
package waltest
