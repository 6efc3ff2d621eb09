package redis

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/e2e/sinks/sinktest"
)

// cutProxy forwards TCP connections to a server and cuts all of them now and then, so that
// pipelines break off half sent or half answered.
type cutProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
	cuts  int
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(s, c); s.Close() }()
			go func() { defer wg.Done(); io.Copy(c, s); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		wg.Wait()
	})
	return p
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	if len(p.conns) > 0 {
		p.cuts++
	}
	p.conns = nil
}

// TestConnectionCuts: with the connection cut every few milliseconds, the sink retries chunks
// whose transaction may or may not have been applied, and the keyspace still equals the model;
// streams hold each change once (a retried chunk must not trust what it remembered of the
// chunk's rows).
func TestConnectionCuts(t *testing.T) {
	for _, v := range []struct{ typ, store string }{{TypeHash, StoreField}, {TypeHash, StoreKey}, {TypeStream, ""}} {
		typ := v.typ
		t.Run(strings.Trim(typ+"-"+v.store, "-"), func(t *testing.T) {
			addr, db := testDB(t)
			c := client(t, addr, db)
			proxy := newCutProxy(t, addr)
			var logs syncBuffer
			_, port, _ := net.SplitHostPort(proxy.ln.Addr().String())
			s := newTestSink(t, "127.0.0.1:"+port, db, map[string]string{KeyType: typ, KeyVersionStore: or(v.store, StoreField), KeyMaxRetries: "1000", KeyRetryBackoff: "1", KeyRetryBackoffMx: "5", KeyBatchSize: "20"},
				slog.New(slog.NewTextHandler(&logs, nil)))
			w := sinktest.Generate(sinktest.Options{Seed: 31, Transactions: 4000, Shape: sinktest.Envelope, Partial: true})
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				rng := rand.New(rand.NewPCG(1, 2))
				for {
					select {
					case <-stop:
						return
					case <-time.After(time.Duration(500+rng.IntN(3000)) * time.Microsecond):
						proxy.cut()
					}
				}
			}()

			writeAll(t, s, w.Records, 1, 200)
			close(stop)
			<-done
			if typ == TypeStream {
				checkStreams(t, c, w, "after the workload through a cutting proxy")
			} else if d := diffKeys(expected(t, w, TypeHash, ""), keyspace(t, c, TypeHash, "")); d != "" {
				t.Fatalf("keyspace after the workload through a cutting proxy:\n%s", d)
			}
			st := s.Stats()
			proxy.mu.Lock()
			cuts := proxy.cuts
			proxy.mu.Unlock()
			if cuts == 0 || st.Retries == 0 {
				t.Fatalf("%d cuts, %d retries: nothing was tested", cuts, st.Retries)
			}
			if n := strings.Count(logs.String(), "redis write failed; retrying"); int64(n) != st.Retries {
				t.Fatalf("%d retries logged, %d counted", n, st.Retries)
			}
			t.Logf("%d connection cuts, %s retries", cuts, strconv.FormatInt(st.Retries, 10))
		})
	}
}
