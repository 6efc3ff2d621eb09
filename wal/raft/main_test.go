package raft

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The process tests run this test binary as cluster nodes: with
// nodeChildEnv set, TestMain runs a node instead of the tests.
const (
	nodeChildEnv = "SLUICE_RAFT_NODE" // node id
	nodeDirEnv   = "SLUICE_RAFT_NODE_DIR"
	nodeListEnv  = "SLUICE_RAFT_NODES" // id=addr,id=addr,…
	nodeTickEnv  = "SLUICE_RAFT_TICK"  // tick interval
)

func TestMain(m *testing.M) {
	if os.Getenv(nodeChildEnv) != "" {
		os.Exit(nodeChildMain())
	}
	goleak.VerifyTestMain(m)
}

func nodeChildMain() int {
	defer sluiceGC()()
	id, err := strconv.ParseUint(os.Getenv(nodeChildEnv), 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "node id:", err)
		return 2
	}
	nodes, err := parseNodeList(os.Getenv(nodeListEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodes:", err)
		return 2
	}
	tick, _ := time.ParseDuration(os.Getenv(nodeTickEnv))
	cfg := Config{
		Dir: os.Getenv(nodeDirEnv), NodeID: id, Nodes: nodes, TickInterval: tick,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", id),
	}
	l, err := Open(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := l.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		l.Close()
		return 1
	}
	if err := l.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close:", err)
		return 1
	}
	return 0
}

func parseNodeList(s string) ([]Node, error) {
	var out []Node
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(part, "=")
		n, err := strconv.ParseUint(id, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("bad node %q", part)
		}
		out = append(out, Node{ID: n, Addr: addr})
	}
	return out, nil
}

func formatNodeList(nodes []Node) string {
	var parts []string
	for _, n := range nodes {
		parts = append(parts, fmt.Sprintf("%d=%s", n.ID, n.Addr))
	}
	return strings.Join(parts, ",")
}

// iterations reads a test's iteration count from env, with a short
// default for plain go test; SLUICE_SOAK=1 multiplies it by ten.
func iterations(env string, def int) int {
	n := def
	if v, err := strconv.Atoi(os.Getenv(env)); err == nil && v > 0 {
		n = v
	}
	if os.Getenv("SLUICE_SOAK") == "1" {
		n *= 10
	}
	return n
}
