package config_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/config"
)

func TestClusterSettings(t *testing.T) {
	p, errs := load(t, "log:\n  dir: /x\n  cluster:\n    node_id: 2\n    nodes: [1=10.0.0.1:9400, 2=10.0.0.2:9400, 3=10.0.0.3:9400]\n"+
		"    replication_factor: 3\n    listen: 0.0.0.0:9400\n    tick: 50ms\n    election_ticks: 20\n"+
		"    tls: {cert: /etc/s/n.crt, key: /etc/s/n.key, ca: /etc/s/ca.crt}\n")
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	want := config.ClusterSettings{
		NodeID: 2, Nodes: []config.ClusterNode{{1, "10.0.0.1:9400"}, {2, "10.0.0.2:9400"}, {3, "10.0.0.3:9400"}},
		ReplicationFactor: 3, Listen: "0.0.0.0:9400", Tick: 50 * time.Millisecond, ElectionTicks: 20,
		TLSCert: "/etc/s/n.crt", TLSKey: "/etc/s/n.key", TLSCA: "/etc/s/ca.crt",
	}
	if d := cmp.Diff(want, p.Log.Cluster); d != "" || !p.Log.Cluster.Enabled() {
		t.Fatalf("cluster settings (-want +got):\n%s", d)
	}
	p, errs = load(t, "log:\n  dir: /x\n")
	if len(errs) != 0 || p.Log.Cluster.Enabled() {
		t.Fatalf("no cluster section: %v %+v", errs, p.Log.Cluster)
	}
}

func TestClusterSettingsErrors(t *testing.T) {
	tests := []struct {
		name, text string
		want       []string
	}{
		{"node not listed", "log:\n  dir: /x\n  cluster:\n    node_id: 4\n    nodes: [1=a:1, 2=b:1, 3=c:1]\n", []string{
			"pipeline.yaml:4:14: log.cluster.node_id: must be the id of one of the nodes (got 4)"}},
		{"no node id", "log:\n  dir: /x\n  cluster:\n    nodes: [1=a:1]\n", []string{
			"pipeline.yaml:4:12: log.cluster.node_id: is required with nodes (this node's id)"}},
		{"no nodes", "log:\n  dir: /x\n  cluster:\n    node_id: 1\n", []string{
			"pipeline.yaml:4:14: log.cluster.nodes: is required with node_id and replication_factor (the cluster's nodes, id=host:port)"}},
		{"bad factor and values", "log:\n  dir: /x\n  cluster:\n    node_id: 1\n    nodes: [1=a:1, 1=b:1, 2=nohost]\n    replication_factor: 2\n    tick: 1h\n    election_ticks: 1\n    lead: yes\n", []string{
			`pipeline.yaml:5:12: log.cluster.nodes[1]: node 1 or address b:1 is listed twice`,
			`pipeline.yaml:5:12: log.cluster.nodes[2]: must be id=host:port (got "2=nohost")`,
			"pipeline.yaml:6:25: log.cluster.replication_factor: must be 1 or 3 (got 2)",
			"pipeline.yaml:7:11: log.cluster.tick: must be a duration from 1ms to 10s (got 1h)",
			"pipeline.yaml:8:21: log.cluster.election_ticks: must be 2..1000 (got 1)",
			`pipeline.yaml:9:5: log.cluster.lead: unknown key; known keys: node_id, nodes, replication_factor, listen, tick, election_ticks, tls`}},
		{"factor above nodes", "log:\n  dir: /x\n  cluster:\n    node_id: 1\n    nodes: [1=a:1]\n    replication_factor: 3\n", []string{
			"pipeline.yaml:6:25: log.cluster.replication_factor: must be at most the number of nodes, 1 (got 3)"}},
		{"partial tls", "log:\n  dir: /x\n  cluster:\n    node_id: 1\n    nodes: [1=a:1]\n    tls: {cert: /c}\n", []string{
			"pipeline.yaml:6:5: log.cluster.tls: needs cert, key and ca"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := load(t, tc.text)
			if d := cmp.Diff(tc.want, errs); d != "" {
				t.Fatalf("(-want +got):\n%s", d)
			}
		})
	}
}
