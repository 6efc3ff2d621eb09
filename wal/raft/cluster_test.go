package raft

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/wal"
)

// The replicated log serves the runtime's Log interface as *wal.Log does.
var _ runtime.Log = (*Log)(nil)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func localRecords(t testing.TB, l *Log, topic string, part int32) []logRec {
	t.Helper()
	start, err := l.WAL().EarliestOffset(topic, part)
	if err != nil {
		t.Fatal(err)
	}
	var out []logRec
	for off := start; ; {
		res, err := l.WAL().Fetch(context.Background(), topic, part, off, wal.FetchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Records {
			out = append(out, logRec{r.Offset, string(r.Value)})
		}
		if res.NextOffset >= res.HighWatermark {
			return out
		}
		off = res.NextOffset
	}
}

func statusOf(l *Log, topic string, part int32) PartitionStatus {
	for _, st := range l.Partitions() {
		if st.Topic == topic && st.Partition == part {
			return st
		}
	}
	return PartitionStatus{}
}

// TestClusterAPI exercises the Log API from every node, through
// forwarding: topics, appends, fetches, offsets, producers and their
// state, consumer offsets, and the refusals.
func TestClusterAPI(t *testing.T) {
	ns := startCluster(t, 3, nil)
	ctx := ctxT(t, 60*time.Second)
	if err := ns[1].l.CreateTopicReplicas(ctx, "api", smallTopic(3), 3); err != nil {
		t.Fatal(err)
	}
	if err := ns[2].l.CreateTopic("api", smallTopic(1)); !errors.Is(err, wal.ErrTopicExists) {
		t.Fatalf("second create: %v", err)
	}
	for _, n := range ns {
		// Describe asks the meta leader when this node does not know the
		// topic yet; Topics lists what this node applied.
		if info, err := n.l.Describe("api"); err != nil || len(info.Partitions) != 3 {
			t.Fatalf("node %d describe: %+v %v", n.cfg.NodeID, info, err)
		}
		waitFor(t, 10*time.Second, "the topic listed on every node", func() bool {
			return cmp.Equal(n.l.Topics(), []string{"__consumer_offsets", "__sluice_cluster", "__sluice_producers", "api"})
		})
	}
	id, epoch, err := ns[2].l.InitProducer(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	id2, epoch2, err := ns[0].l.InitProducer(ctx, "src")
	if err != nil || id2 != id || epoch2 != epoch+1 {
		t.Fatalf("second init of the same transactional id: %d/%d %v, want %d/%d", id2, epoch2, err, id, epoch+1)
	}
	// The old epoch is fenced, from any node.
	_, err = ns[1].l.Append(ctx, "api", 1, []wal.Record{{Key: []byte("k"), Value: []byte("x")}}, wal.AppendOptions{ProducerID: id, ProducerEpoch: epoch})
	if !errors.Is(err, wal.ErrProducerFenced) {
		t.Fatalf("append with a fenced epoch: %v", err)
	}
	opts := wal.AppendOptions{ProducerID: id2, ProducerEpoch: epoch2, SourcePosition: []byte("pos-1")}
	res, err := ns[0].l.Append(ctx, "api", 1, []wal.Record{{Key: []byte("k"), Value: []byte("a")}, {Key: []byte("k"), Value: []byte("b")}}, opts)
	if err != nil || res.BaseOffset != 0 || res.LastOffset != 1 {
		t.Fatalf("append: %+v %v", res, err)
	}
	// A retry through another node returns the original offsets.
	again, err := ns[2].l.Append(ctx, "api", 1, []wal.Record{{Key: []byte("k"), Value: []byte("a")}, {Key: []byte("k"), Value: []byte("b")}}, opts)
	if err != nil || !again.Duplicate || again.BaseOffset != 0 {
		t.Fatalf("retry: %+v %v", again, err)
	}
	opts.BaseSequence, opts.SourcePosition = 5, []byte("pos-2")
	if _, err := ns[1].l.Append(ctx, "api", 1, []wal.Record{{Key: []byte("k"), Value: []byte("c")}}, opts); !errors.Is(err, wal.ErrOutOfOrderSequence) {
		t.Fatalf("gap: %v", err)
	}
	st, ok := ns[1].l.ProducerState("api", 1, id2)
	if !ok || st.LastSequence != 1 || st.LastOffset != 1 || string(st.SourcePosition) != "pos-1" {
		t.Fatalf("producer state %+v %v", st, ok)
	}
	for _, n := range ns {
		hw, err := n.l.LatestOffset("api", 1)
		if err != nil || hw != 2 {
			t.Fatalf("node %d latest %d %v", n.cfg.NodeID, hw, err)
		}
		out, err := n.l.Fetch(ctx, "api", 1, 0, wal.FetchOptions{})
		if err != nil || len(out.Records) != 2 || string(out.Records[1].Value) != "b" {
			t.Fatalf("node %d fetch %+v %v", n.cfg.NodeID, out, err)
		}
		if _, err := n.l.Fetch(ctx, "api", 1, 3, wal.FetchOptions{}); !errors.Is(err, wal.ErrOffsetOutOfRange) {
			t.Fatalf("fetch past the end: %v", err)
		}
	}
	// A long poll at the end wakes when another node appends.
	done := make(chan wal.FetchResult, 1)
	go func() {
		r, _ := ns[2].l.Fetch(ctx, "api", 1, 2, wal.FetchOptions{MaxWait: 10 * time.Second})
		done <- r
	}()
	time.Sleep(50 * time.Millisecond)
	if _, err := ns[0].l.Append(ctx, "api", 1, []wal.Record{{Key: []byte("k"), Value: []byte("d")}}, wal.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if len(r.Records) != 1 || string(r.Records[0].Value) != "d" {
			t.Fatalf("long poll got %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long poll did not wake")
	}
	// Consumer offsets, committed anywhere, read anywhere.
	tp := wal.TopicPartition{Topic: "api", Partition: 1}
	if err := ns[2].l.CommitOffsets(ctx, "g", map[wal.TopicPartition]int64{tp: 2}); err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		got, err := n.l.FetchOffsets("g")
		if err != nil || got[tp] != 2 {
			t.Fatalf("node %d offsets %v %v", n.cfg.NodeID, got, err)
		}
	}
	if _, err := ns[0].l.Append(ctx, "nope", 0, []wal.Record{{Value: []byte("x")}}, wal.AppendOptions{}); !errors.Is(err, wal.ErrUnknownTopic) {
		t.Fatalf("append to an unknown topic: %v", err)
	}
	if _, err := ns[0].l.Append(ctx, "api", 7, []wal.Record{{Value: []byte("x")}}, wal.AppendOptions{}); !errors.Is(err, wal.ErrUnknownPartition) {
		t.Fatalf("append to an unknown partition: %v", err)
	}
	// Every partition has one serving leader, and its followers' lag.
	for p := int32(0); p < 3; p++ {
		waitFor(t, 10*time.Second, fmt.Sprintf("a leader of api-%d", p), func() bool {
			for _, n := range ns {
				if statusOf(n.l, "api", p).Serving {
					return true
				}
			}
			return false
		})
		leaders := 0
		for _, n := range ns {
			st := statusOf(n.l, "api", p)
			if st.Serving {
				leaders++
				if len(st.Followers) != 2 {
					t.Fatalf("leader of api-%d reports followers %+v", p, st.Followers)
				}
			}
		}
		if leaders != 1 {
			t.Fatalf("api-%d has %d serving leaders", p, leaders)
		}
	}
	// An idempotent append on the leader's node reports its placement
	// (Written), once.
	for _, n := range ns {
		if !statusOf(n.l, "api", 2).Serving {
			continue
		}
		var calls atomic.Int32
		_, err := n.l.Append(ctx, "api", 2, []wal.Record{{Key: []byte("k"), Value: []byte("w")}},
			wal.AppendOptions{ProducerID: id2, ProducerEpoch: epoch2, Written: func() { calls.Add(1) }})
		if err != nil || calls.Load() != 1 {
			t.Fatalf("append on the leader of api-2: %v, Written called %d times, want once", err, calls.Load())
		}
		// Not for an append without a producer id: were it lost and retried,
		// nothing would keep it from landing after a later one.
		calls.Store(0)
		_, err = n.l.Append(ctx, "api", 2, []wal.Record{{Key: []byte("k"), Value: []byte("x")}},
			wal.AppendOptions{Written: func() { calls.Add(1) }})
		if err != nil || calls.Load() != 0 {
			t.Fatalf("append without a producer on the leader of api-2: %v, Written called %d times, want none", err, calls.Load())
		}
	}
}

// TestReplicationFactorOne: a topic with one replica lives on one node
// only; the others forward to it.
func TestReplicationFactorOne(t *testing.T) {
	ns := startCluster(t, 3, nil)
	ctx := ctxT(t, 60*time.Second)
	if err := ns[0].l.CreateTopicReplicas(ctx, "one", smallTopic(2), 1); err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 2; p++ {
		var hosts []uint64
		for _, n := range ns {
			if _, err := n.l.WAL().Describe("one"); err == nil {
				if st := statusOf(n.l, "one", p); st.Topic != "" {
					hosts = append(hosts, n.cfg.NodeID)
				}
			}
		}
		if len(hosts) != 1 {
			t.Fatalf("one-%d is replicated on nodes %v, want one node", p, hosts)
		}
		for i, n := range ns {
			res, err := n.l.Append(ctx, "one", p, []wal.Record{{Key: []byte("k"), Value: []byte(fmt.Sprint(i))}}, wal.AppendOptions{})
			if err != nil || res.BaseOffset != int64(i) {
				t.Fatalf("append to one-%d through node %d: %+v %v", p, n.cfg.NodeID, res, err)
			}
		}
		hw, err := ns[2].l.LatestOffset("one", p)
		if err != nil || hw != 3 {
			t.Fatalf("one-%d latest %d %v", p, hw, err)
		}
	}
	if err := ns[0].l.CreateTopicReplicas(ctx, "two", smallTopic(1), 2); err == nil || !strings.Contains(err.Error(), "replication factor must be 1 or 3") {
		t.Fatalf("replication factor 2: %v", err)
	}
}

// TestSnapshotCatchUp: a node down while the others append and their
// retention removes what it lacks comes back through a snapshot: the
// sealed segment files streamed from the leader over the transport.
func TestSnapshotCatchUp(t *testing.T) {
	var ahead atomic.Int64 // the nodes' clocks run this far ahead
	ns := startCluster(t, 3, func(c *Config) {
		c.WAL.MaintenanceInterval = 100 * time.Millisecond
		c.WAL.Clock = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	})
	ctx := ctxT(t, 60*time.Second)
	cfg := smallTopic(1)
	cfg.SegmentBytes = 4096
	cfg.Retention = time.Hour
	if err := ns[0].l.CreateTopicReplicas(ctx, "snap", cfg, 3); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a leader", func() bool {
		for _, n := range ns {
			if statusOf(n.l, "snap", 0).Serving {
				return true
			}
		}
		return false
	})
	var down *testNode
	for _, n := range ns {
		if !statusOf(n.l, "snap", 0).Serving {
			down = n
			break
		}
	}
	if _, err := ns[0].l.Append(ctx, "snap", 0, []wal.Record{{Key: []byte("k"), Value: []byte("first")}}, wal.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	down.stop(t)
	var up []*testNode
	for _, n := range ns {
		if n != down {
			up = append(up, n)
		}
	}
	for i := 0; i < 300; i++ {
		v := fmt.Sprintf("v%03d-%0200d", i, 0)
		if _, err := up[i%2].l.Append(ctx, "snap", 0, []wal.Record{{Key: []byte("k"), Value: []byte(v)}}, wal.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Retention: the clocks jump two hours ahead, and every sealed segment
	// goes.
	ahead.Store(int64(2 * time.Hour))
	var leader *Log
	for _, n := range up {
		if statusOf(n.l, "snap", 0).Serving {
			leader = n.l
		}
	}
	if leader == nil {
		t.Fatal("no leader among the live nodes")
	}
	var start uint64
	waitFor(t, 10*time.Second, "retention on the leader", func() bool {
		start, _ = leader.group(groupKey{"snap", 0}).rl.Start()
		return start > 100
	})
	down.start(t)
	waitFor(t, 30*time.Second, "the restarted node to catch up", func() bool {
		st, ld := statusOf(down.l, "snap", 0), statusOf(leader, "snap", 0)
		return st.CommitIndex == ld.CommitIndex && st.LastIndex == ld.LastIndex && st.HighWatermark == ld.HighWatermark
	})
	got, want := localRecords(t, down.l, "snap", 0), localRecords(t, leader, "snap", 0)
	if len(got) == 0 || got[0].Value == "first" {
		t.Fatalf("restarted node did not take the leader's log (first record %+v)", got[:min(1, len(got))])
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("restarted node's log (-leader +node):\n%s", d)
	}
	if s, _ := down.l.group(groupKey{"snap", 0}).rl.Start(); s < start {
		t.Fatalf("restarted node's log starts after %d, the leader's after %d: no snapshot", s, start)
	}
	// And it follows normally afterwards.
	if _, err := ns[0].l.Append(ctx, "snap", 0, []wal.Record{{Key: []byte("k"), Value: []byte("after")}}, wal.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the last append on the restarted node", func() bool {
		recs := localRecords(t, down.l, "snap", 0)
		return len(recs) > 0 && recs[len(recs)-1].Value == "after"
	})
}

// testCA makes a CA and certificates for 127.0.0.1 signed by it.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t testing.TB) *testCA {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

func (ca *testCA) tlsConfig(t testing.TB, serial int64) *tls.Config {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: fmt.Sprint("node", serial)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		RootCAs:      ca.pool, ClientCAs: ca.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	}
}

// TestTLS runs a cluster over TLS; a client without a certificate of the
// cluster's CA is refused.
func TestTLS(t *testing.T) {
	ca := newTestCA(t)
	serial := int64(10)
	ns := startCluster(t, 3, func(c *Config) { serial++; c.TLS = ca.tlsConfig(t, serial) })
	ctx := ctxT(t, 60*time.Second)
	if err := ns[0].l.CreateTopicReplicas(ctx, "sec", smallTopic(1), 3); err != nil {
		t.Fatal(err)
	}
	if _, err := ns[2].l.Append(ctx, "sec", 0, []wal.Record{{Value: []byte("x")}}, wal.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	nodes := ns[0].cfg.Nodes
	good := NewClient(nodes, "", ca.tlsConfig(t, 99))
	defer good.Close()
	res, err := good.Fetch(ctx, 0, "sec", 0, 0, wal.FetchOptions{})
	if err != nil || len(res.Records) != 1 {
		t.Fatalf("fetch over TLS: %+v %v", res, err)
	}
	other := newTestCA(t)
	bad := NewClient(nodes, "", other.tlsConfig(t, 100))
	defer bad.Close()
	bctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := bad.Fetch(bctx, 0, "sec", 0, 0, wal.FetchOptions{}); err == nil {
		t.Fatal("a client with another CA's certificate was served")
	}
	plain := NewClient(nodes, "", nil)
	defer plain.Close()
	pctx, cancel2 := context.WithTimeout(ctx, time.Second)
	defer cancel2()
	if _, err := plain.Fetch(pctx, 0, "sec", 0, 0, wal.FetchOptions{}); err == nil {
		t.Fatal("a plain-TCP client was served by a TLS cluster")
	}
}
