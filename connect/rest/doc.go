// Package rest is sluice's admin API: Kafka Connect's REST API (paths, status codes and JSON
// shapes, so that kcctl, kafka-ui and scripts work unchanged) plus sluice's own endpoints for
// the log, sink rebuilds, lag, read-your-writes waits and Prometheus metrics.
//
// # Contract
//
//   - Every answer that is not a success is {"error_code": <status>, "message": "..."} with a
//     4xx or 5xx status; a message names the field, parameter or path segment at fault and
//     never carries a stack trace.
//   - Request bodies are JSON (Content-Type application/json, or none), at most
//     Options.MaxBodyBytes, decoded strictly: duplicate keys, unknown fields, wrong types and
//     trailing data are refused with 400, a body over the limit with 413.
//   - With Options.Token set, every endpoint but GET /health needs the token, as a bearer
//     token or as the HTTP Basic password (401 otherwise, compared in constant time).
//   - Secrets never leave the process: configurations are shown as written, with every value
//     of a key a plugin declares secret as "****" and placeholders (${env:...}, ${file:...})
//     unresolved; any value a request revealed (a secret written inline, a placeholder's
//     resolved value) is replaced by "****" in the answer to that request. Request logs name the
//     method, path and status, never a body.
//   - Connectors of pipeline files cannot be changed or deleted through the API (409): the
//     files are applied again at every start. Their state (pause, stop, offsets) can.
//
// # Example
//
//	srv, err := rest.New(rest.Options{Runtime: rt, Listeners: []rest.Listener{{Addr: "127.0.0.1:8083"}}, Token: token})
//	if err := srv.Listen(); err != nil { ... }   // binding errors at start
//	go srv.Run(ctx)                              // until ctx ends; then a graceful shutdown
package rest
