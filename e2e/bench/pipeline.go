package main

import (
	"fmt"
	"strings"
	"text/template"
)

// pipe describes one benchmark pipeline: a source table into the log and, with Sinks, into an
// Elasticsearch index and a Redis keyspace (both flattened by unwrap).
type pipe struct {
	LogDir string
	API    string
	// Cluster is a log.cluster block (3-node runs), or empty.
	ClusterID    int
	ClusterNodes string

	Kind         string // "mysql" or "postgres"
	Prefix       string // topic prefix
	DB           string // MariaDB database / PostgreSQL schema
	Table        string
	ServerID     int    // MariaDB reader id
	Slot         string // PostgreSQL slot
	Publication  string // PostgreSQL publication (made by the bench)
	SnapshotMode string
	Extra        map[string]string // more source keys

	Sinks    bool
	MaxPoll  int    // the sinks' consumer.override.max.poll.records (0: the default, 500)
	Refresh  string // the Elasticsearch index refresh interval
	SinkOnly bool   // no connectors at all (W5's other nodes)

	MySQLPort, PGPort, RedisPort, ESPort int
	MySQLUser, PGUser                    string
}

// topic is the pipe's topic name.
func (p pipe) topic() string { return p.Prefix + "." + p.DB + "." + p.Table }

const pipelineTemplate = `log:
  dir: {{.LogDir}}
{{- if .ClusterNodes}}
  cluster:
    node_id: {{.ClusterID}}
    nodes: [{{.ClusterNodes}}]
    replication_factor: 3
{{- end}}

rest:
  listeners: [http://{{.API}}]

{{- if .SinkOnly}}
connectors: []
{{- else}}
connectors:
  - name: src
    class: {{.Kind}}
    config:
      database.hostname: 127.0.0.1
{{- if eq .Kind "mysql"}}
      database.port: {{.MySQLPort}}
      database.user: {{.MySQLUser}}
      database.password: ${env:BENCH_MYSQL_PASSWORD}
      database.server.id: {{.ServerID}}
      database.include.list: {{.DB}}
{{- else}}
      database.port: {{.PGPort}}
      database.user: {{.PGUser}}
      database.dbname: postgres
      database.sslmode: disable
      slot.name: {{.Slot}}
      publication.name: {{.Publication}}
      publication.autocreate.mode: disabled
      table.include.list: {{.DB}}\.{{.Table}}
      status.update.interval.ms: 500
{{- end}}
      topic.prefix: {{.Prefix}}
      snapshot.mode: {{.SnapshotMode}}
{{- range $k, $v := .Extra}}
      {{$k}}: {{$v}}
{{- end}}
{{- if .Sinks}}

  - name: es
    class: elasticsearch
    config:
      connection.url: http://127.0.0.1:{{.ESPort}}
      topics: {{.Prefix}}.{{.DB}}.{{.Table}}
      index.settings: '{"index.refresh_interval":"{{.Refresh}}","number_of_replicas":0}'
{{- if .MaxPoll}}
      consumer.override.max.poll.records: {{.MaxPoll}}
{{- end}}
      transforms: unwrap
      transforms.unwrap.type: io.debezium.transforms.ExtractNewRecordState

  - name: redis
    class: redis
    config:
      redis.uri: redis://127.0.0.1:{{.RedisPort}}
      topics: {{.Prefix}}.{{.DB}}.{{.Table}}
      redis.key: ${topic}:${key}
{{- if .MaxPoll}}
      consumer.override.max.poll.records: {{.MaxPoll}}
{{- end}}
      transforms: unwrap
      transforms.unwrap.type: io.debezium.transforms.ExtractNewRecordState
{{- end}}
{{- end}}
`

var pipelineTmpl = template.Must(template.New("pipeline").Parse(pipelineTemplate))

// newPipe fills the server addresses of a pipe.
func (b *bench) newPipe(kind, prefix, db string) pipe {
	return pipe{
		Kind: kind, Prefix: prefix, DB: db, Table: "t", Refresh: esRefresh, MaxPoll: b.opts.MaxPoll,
		MySQLPort: b.my.Port, MySQLUser: b.my.ReplUser, PGPort: b.pg.Port, PGUser: b.pg.User,
		RedisPort: b.rds.Port, ESPort: b.es.Port,
	}
}

// esRefresh is the refresh interval of every index the sinks create.
const esRefresh = "1s"

func (p pipe) render() (string, error) {
	var s strings.Builder
	if err := pipelineTmpl.Execute(&s, p); err != nil {
		return "", fmt.Errorf("pipeline template: %w", err)
	}
	return s.String(), nil
}
