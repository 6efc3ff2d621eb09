package raft

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"time"

	"github.com/sluice-cdc/sluice/wal"
)

// Node is one member of the cluster.
type Node struct {
	// ID identifies the node for all time; never reuse one. Must be > 0.
	ID uint64
	// Addr is the host:port the node listens on for the other nodes and
	// clients, and where they dial it.
	Addr string
}

// TLSFiles configure TLS between nodes (and for clients): every node
// presents CertFile/KeyFile and accepts only peers whose certificate is
// signed by CAFile. All empty: plain TCP.
type TLSFiles struct {
	CertFile string
	KeyFile  string
	CAFile   string
	// ServerName overrides the name checked in a peer's certificate; empty
	// means the host of the address dialed.
	ServerName string
}

// Config configures a node of a replicated log.
type Config struct {
	// Dir is the node's log directory (a wal log).
	Dir string
	// NodeID is this node's id; it must be one of Nodes.
	NodeID uint64
	// Nodes is the static cluster: every node, this one included.
	Nodes []Node
	// ListenAddr overrides this node's Addr for listening (for example
	// ":9400" while peers dial a public name). Empty: this node's Addr.
	ListenAddr string
	// ClusterName must be equal on every node; a connection from a node of
	// another cluster is refused. Empty: "sluice".
	ClusterName string
	// TLS, when set, encrypts and authenticates every connection.
	TLS *tls.Config
	// ReplicationFactor is the number of replicas of a topic created by
	// CreateTopic: 1 or 3 (at most the number of nodes). Zero: 3 with at
	// least 3 nodes, else 1. Internal topics are replicated on every node.
	ReplicationFactor int
	// TickInterval is Raft's clock tick; zero: 100ms.
	TickInterval time.Duration
	// ElectionTicks is how many ticks without a leader make a follower
	// start an election (randomised up to twice that); zero: 10. Failover
	// takes about ElectionTicks..2×ElectionTicks ticks plus one round trip.
	ElectionTicks int
	// HeartbeatTicks is how many ticks pass between a leader's heartbeats;
	// zero: 1.
	HeartbeatTicks int
	// RequestTimeout bounds a call that has no deadline of its own
	// (including the calls without a context); zero: 10s.
	RequestTimeout time.Duration
	// MaxMessageBytes bounds one replication message; zero: 1 MiB.
	MaxMessageBytes uint64
	// MaxUncommittedBytes bounds a leader's uncommitted entries per
	// partition; proposals beyond it wait. Zero: 64 MiB.
	MaxUncommittedBytes uint64
	// EntryCacheBytes bounds the recent entries kept in memory per
	// partition, so that replication and commit rarely read the disk.
	// Zero: 4 MiB.
	EntryCacheBytes int
	// CommitCheckpoint is how often a partition's commit index is written
	// to its replica state file (term and vote changes are written at
	// once); zero: 1s. A restarted replica serves up to the checkpoint
	// until it hears from the leader.
	CommitCheckpoint time.Duration
	// SnapshotTimeout is how long a leader waits for a follower receiving a
	// snapshot to ask for more before it starts over; zero: 30s.
	SnapshotTimeout time.Duration
	// WAL are the options of the node's wal log.
	WAL wal.Options
	// Logger receives lifecycle messages; nil discards them.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.ClusterName == "" {
		c.ClusterName = "sluice"
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = 1
		if len(c.Nodes) >= 3 {
			c.ReplicationFactor = 3
		}
	}
	if c.TickInterval <= 0 {
		c.TickInterval = 100 * time.Millisecond
	}
	if c.ElectionTicks <= 0 {
		c.ElectionTicks = 10
	}
	if c.HeartbeatTicks <= 0 {
		c.HeartbeatTicks = 1
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = 1 << 20
	}
	if c.MaxUncommittedBytes == 0 {
		c.MaxUncommittedBytes = 64 << 20
	}
	if c.EntryCacheBytes <= 0 {
		c.EntryCacheBytes = 4 << 20
	}
	if c.CommitCheckpoint <= 0 {
		c.CommitCheckpoint = time.Second
	}
	if c.SnapshotTimeout <= 0 {
		c.SnapshotTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.WAL.Logger == nil {
		c.WAL.Logger = c.Logger
	}
}

// Validate reports every problem of the configuration at once.
func (c *Config) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("dir: is required"))
	}
	if len(c.Nodes) == 0 {
		errs = append(errs, errors.New("nodes: at least one node is required"))
	}
	ids, addrs := map[uint64]bool{}, map[string]bool{}
	self := false
	for i, n := range c.Nodes {
		if n.ID == 0 {
			errs = append(errs, fmt.Errorf("nodes[%d].id: must be > 0 (got 0)", i))
		}
		if ids[n.ID] {
			errs = append(errs, fmt.Errorf("nodes[%d].id: %d is used twice", i, n.ID))
		}
		ids[n.ID] = true
		if _, _, err := net.SplitHostPort(n.Addr); err != nil {
			errs = append(errs, fmt.Errorf("nodes[%d].addr: must be host:port (got %q)", i, n.Addr))
		}
		if addrs[n.Addr] {
			errs = append(errs, fmt.Errorf("nodes[%d].addr: %s is used twice", i, n.Addr))
		}
		addrs[n.Addr] = true
		self = self || n.ID == c.NodeID
	}
	if !self {
		errs = append(errs, fmt.Errorf("node_id: %d is not one of the nodes", c.NodeID))
	}
	if rf := c.ReplicationFactor; rf != 0 && rf != 1 && rf != 3 {
		errs = append(errs, fmt.Errorf("replication_factor: must be 1 or 3 (got %d)", rf))
	} else if rf > len(c.Nodes) {
		errs = append(errs, fmt.Errorf("replication_factor: %d is more than the %d nodes", rf, len(c.Nodes)))
	}
	if c.ElectionTicks != 0 && c.ElectionTicks <= max(c.HeartbeatTicks, 1) {
		errs = append(errs, fmt.Errorf("election_ticks: must be more than heartbeat_ticks (got %d <= %d)", c.ElectionTicks, max(c.HeartbeatTicks, 1)))
	}
	return errors.Join(errs...)
}

// nodeIDs returns the sorted node ids.
func (c *Config) nodeIDs() []uint64 {
	out := make([]uint64, 0, len(c.Nodes))
	for _, n := range c.Nodes {
		out = append(out, n.ID)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// LoadTLS builds the tls.Config of a node from files: its certificate,
// and the CA its peers' certificates must be signed by (required both ways).
func LoadTLS(f TLSFiles) (*tls.Config, error) {
	if f.CertFile == "" && f.KeyFile == "" && f.CAFile == "" {
		return nil, nil
	}
	if f.CertFile == "" || f.KeyFile == "" || f.CAFile == "" {
		return nil, errors.New("tls: cert_file, key_file and ca_file are all required")
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: load key pair: %w", err)
	}
	pem, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, fmt.Errorf("tls: read ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: ca_file %s holds no PEM certificate", f.CAFile)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ServerName:   f.ServerName,
		MinVersion:   tls.VersionTLS12,
	}, nil
}
