// Package runtime holds the end-to-end tests and benchmarks of the runtime: the sluice binary
// killed with SIGKILL at random moments while datagen feeds the log and the file sink drains
// it, the same with three sluice nodes of a replicated log (a random one killed each time),
// signals, and the runtime's throughput against the bare log.
package runtime
