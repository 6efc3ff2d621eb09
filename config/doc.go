// Package config loads pipeline files: YAML with the log settings and a list of connectors,
// each {name, class, config} where config uses Kafka Connect / Debezium key names.
//
//	log:
//	  dir: ./data
//	  partitions: 3
//	connectors:
//	  - name: inventory
//	    class: datagen
//	    config:
//	      topic.prefix: demo
//	  - name: out
//	    class: file
//	    config:
//	      topics.regex: demo\..*
//	      file: ./out.jsonl
//
// Decoding is strict: unknown keys, wrong types and duplicates are errors, with a "did you
// mean" where a known key is close. Every problem is reported at once, each as
// "file:line:col: path: message", e.g.
//
//	pipeline.yaml:14:7: connectors[inventory].config.database.port: must be 1..65535 (got 0)
//
// Load checks the file's shape; Resolve substitutes ${env:NAME} and ${file:/path:key}
// placeholders; Check validates every connector and the log settings against a Checker (the
// runtime's definitions). A resolved placeholder's value is kept as a Secret and never appears
// in errors: messages show the placeholder instead.
package config
