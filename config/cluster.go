package config

import (
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// The "log.cluster" section makes the log a replicated one (package
// wal/raft): a static list of nodes, this node's id, and the replication
// factor of the topics it creates.
//
//	log:
//	  dir: /var/lib/sluice
//	  cluster:
//	    node_id: 1
//	    nodes: [1=10.0.0.1:9400, 2=10.0.0.2:9400, 3=10.0.0.3:9400]
//	    replication_factor: 3     # 1 or 3; default 3 with 3+ nodes, else 1
//	    listen: 0.0.0.0:9400      # optional; default this node's address
//	    tick: 100ms               # optional Raft tick
//	    election_ticks: 10        # optional; failover after ~1-2 x this many ticks
//	    tls: {cert: node.crt, key: node.key, ca: ca.crt}   # optional, all three
//
// No nodes (the default): a single node, no replication.

// ClusterNode is one node of the cluster.
type ClusterNode struct {
	ID   uint64
	Addr string // host:port
}

// ClusterSettings are the "log.cluster" settings.
type ClusterSettings struct {
	NodeID            uint64
	Nodes             []ClusterNode
	ReplicationFactor int           // 0: the default
	Listen            string        // empty: this node's address
	Tick              time.Duration // 0: the default
	ElectionTicks     int           // 0: the default
	// TLSCert, TLSKey and TLSCA are PEM files, made absolute; all set or
	// none.
	TLSCert, TLSKey, TLSCA string
}

// Enabled reports whether the log is replicated.
func (c *ClusterSettings) Enabled() bool { return len(c.Nodes) > 0 }

var clusterKeys = []string{"node_id", "nodes", "replication_factor", "listen", "tick", "election_ticks", "tls"}

func (d *decoder) cluster(n ast.Node, path string, c *ClusterSettings, keys map[string]Pos) {
	entries, ok := d.mapping(n, path)
	if !ok {
		return
	}
	var nodeIDAt, nodesAt, rfAt, tlsAt ast.Node
	for _, e := range entries {
		epath := path + "." + e.key
		keys["cluster."+e.key] = d.pos(e.keyN)
		if e.key == "nodes" {
			nodesAt = e.value
			d.clusterNodes(e.value, epath, c)
			continue
		}
		if e.key == "tls" {
			tlsAt = e.keyN
			d.clusterTLS(e.value, epath, c, keys)
			continue
		}
		v, ok := d.str(e.value, e.keyN, epath)
		if !ok {
			continue
		}
		switch e.key {
		case "node_id":
			nodeIDAt = e.value
			id, err := strconv.ParseUint(v, 10, 64)
			if err != nil || id == 0 {
				d.errorf(e.value, epath, "must be a whole number > 0 (got %s)", v)
				continue
			}
			c.NodeID = id
		case "replication_factor":
			rfAt = e.value
			if v != "1" && v != "3" {
				d.errorf(e.value, epath, "must be 1 or 3 (got %s)", v)
				continue
			}
			c.ReplicationFactor, _ = strconv.Atoi(v)
		case "listen":
			if _, _, err := net.SplitHostPort(v); err != nil {
				d.errorf(e.value, epath, "must be host:port (got %q)", v)
				continue
			}
			c.Listen = v
		case "tick":
			t, err := time.ParseDuration(v)
			if err != nil || t < time.Millisecond || t > 10*time.Second {
				d.errorf(e.value, epath, "must be a duration from 1ms to 10s (got %s)", v)
				continue
			}
			c.Tick = t
		case "election_ticks":
			t, err := strconv.Atoi(v)
			if err != nil || t < 2 || t > 1000 {
				d.errorf(e.value, epath, "must be 2..1000 (got %s)", v)
				continue
			}
			c.ElectionTicks = t
		default:
			d.unknown(e.keyN, path, e.key, clusterKeys)
		}
	}
	switch {
	case len(c.Nodes) == 0 && (c.NodeID != 0 || c.ReplicationFactor != 0):
		at := nodeIDAt
		if at == nil {
			at = rfAt
		}
		d.errorf(at, path+".nodes", "is required with node_id and replication_factor (the cluster's nodes, id=host:port)")
	case len(c.Nodes) > 0 && c.NodeID == 0:
		d.errorf(nodesAt, path+".node_id", "is required with nodes (this node's id)")
	case len(c.Nodes) > 0:
		found := false
		for _, nd := range c.Nodes {
			found = found || nd.ID == c.NodeID
		}
		if !found {
			d.errorf(nodeIDAt, path+".node_id", "must be the id of one of the nodes (got %d)", c.NodeID)
		}
		if c.ReplicationFactor > len(c.Nodes) {
			d.errorf(rfAt, path+".replication_factor", "must be at most the number of nodes, %d (got %d)", len(c.Nodes), c.ReplicationFactor)
		}
	}
	if (c.TLSCert != "" || c.TLSKey != "" || c.TLSCA != "") && (c.TLSCert == "" || c.TLSKey == "" || c.TLSCA == "") {
		d.errorf(tlsAt, path+".tls", "needs cert, key and ca")
	}
}

// clusterNodes reads "id=host:port" entries.
func (d *decoder) clusterNodes(n ast.Node, path string, c *ClusterSettings) {
	list, ok := d.list(n, path)
	if !ok {
		return
	}
	ids, addrs := map[uint64]bool{}, map[string]bool{}
	for i, v := range list {
		ipath := path + "[" + strconv.Itoa(i) + "]"
		id, addr, ok := strings.Cut(v, "=")
		nid, err := strconv.ParseUint(id, 10, 64)
		if !ok || err != nil || nid == 0 {
			d.errorf(n, ipath, "must be id=host:port with an id > 0 (got %q)", v)
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			d.errorf(n, ipath, "must be id=host:port (got %q)", v)
			continue
		}
		if ids[nid] || addrs[addr] {
			d.errorf(n, ipath, "node %d or address %s is listed twice", nid, addr)
			continue
		}
		ids[nid], addrs[addr] = true, true
		c.Nodes = append(c.Nodes, ClusterNode{ID: nid, Addr: addr})
	}
}

func (d *decoder) clusterTLS(n ast.Node, path string, c *ClusterSettings, keys map[string]Pos) {
	entries, ok := d.mapping(n, path)
	if !ok {
		return
	}
	for _, e := range entries {
		epath := path + "." + e.key
		keys["cluster.tls."+e.key] = d.pos(e.keyN)
		v, ok := d.str(e.value, e.keyN, epath)
		if !ok {
			continue
		}
		abs, err := filepath.Abs(v)
		if err != nil || strings.TrimSpace(v) == "" {
			d.errorf(e.value, epath, "must be a file path")
			continue
		}
		switch e.key {
		case "cert":
			c.TLSCert = abs
		case "key":
			c.TLSKey = abs
		case "ca":
			c.TLSCA = abs
		default:
			d.unknown(e.keyN, path, e.key, []string{"cert", "key", "ca"})
		}
	}
}
