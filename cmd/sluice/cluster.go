package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/wal"
	"github.com/sluice-cdc/sluice/wal/raft"
	"github.com/sluice-cdc/sluice/wal/vfs"
)

// nodeLog is the log sluice run uses: a single node's wal.Log, or a node
// of a replicated log when log.cluster lists nodes.
type nodeLog interface {
	runtime.Log
	Run(ctx context.Context) error
	Close() error
}

func openNodeLog(p *config.Pipeline, wopts wal.Options, logger *slog.Logger) (nodeLog, error) {
	c := p.Log.Cluster
	if !c.Enabled() {
		l, err := openLog(p.Log.Dir, wopts)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
	tlsConf, err := raft.LoadTLS(raft.TLSFiles{CertFile: c.TLSCert, KeyFile: c.TLSKey, CAFile: c.TLSCA})
	if err != nil {
		return nil, fmt.Errorf("log.cluster.%w", err)
	}
	var nodes []raft.Node
	for _, n := range c.Nodes {
		nodes = append(nodes, raft.Node{ID: n.ID, Addr: n.Addr})
	}
	l, err := raft.Open(raft.Config{
		Dir: p.Log.Dir, NodeID: c.NodeID, Nodes: nodes, ListenAddr: c.Listen, TLS: tlsConf,
		ReplicationFactor: c.ReplicationFactor, TickInterval: c.Tick, ElectionTicks: c.ElectionTicks,
		WAL: wopts, Logger: logger.With("component", "cluster"),
	})
	if errors.Is(err, vfs.ErrLocked) {
		return nil, fmt.Errorf("%w (another sluice process is using this log; stop it first)", err)
	}
	if err != nil {
		return nil, err
	}
	logger.Info("replicated log", "node", c.NodeID, "nodes", len(nodes), "tls", tlsConf != nil)
	return l, nil
}
