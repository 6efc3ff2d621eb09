// Package vfs is the small file-system interface through which package wal
// does all of its file I/O, with an implementation over the operating system
// (OS) and an in-memory one (Mem) that can simulate a crash: it keeps apart
// what was written from what was made durable by Sync and SyncDir, drops or
// tears the unsynced part on Crash, and fails Sync on demand.
//
// The interface is deliberately narrow: it holds only what a log-structured
// store needs, so that every durability decision of the store is visible as
// a call here.
package vfs
