package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/jackc/pgx/v5"
)

// writers are connections that insert single rows, each in its own transaction, with the
// commit time in column ts (SYSDATE(6) / clock_timestamp(): the time the statement runs, a few
// microseconds before its commit).
type writers struct {
	kind string
	db   string
	my   []*client.Conn
	pg   []*pgx.Conn
}

func (b *bench) newWriters(ctx context.Context, kind, db string, n int) (*writers, error) {
	w := &writers{kind: kind, db: db}
	for range n {
		if kind == "mysql" {
			c, err := b.myConn(db)
			if err != nil {
				w.close(ctx)
				return nil, err
			}
			w.my = append(w.my, c)
		} else {
			c, err := b.pgConn(ctx)
			if err != nil {
				w.close(ctx)
				return nil, err
			}
			w.pg = append(w.pg, c)
		}
	}
	return w, nil
}

func (w *writers) insert(ctx context.Context, conn int, id int64) error {
	if w.kind == "mysql" {
		_, err := w.my[conn].Execute(fmt.Sprintf("INSERT INTO %s.t (id, v, s, ts) VALUES (%d, %d, 'written %d', SYSDATE(6))", w.db, id, id%1000, id))
		return err
	}
	_, err := w.pg[conn].Exec(ctx, fmt.Sprintf("INSERT INTO %s.t VALUES (%d, %d, 'written %d', clock_timestamp())", w.db, id, id%1000, id))
	return err
}

func (w *writers) close(ctx context.Context) {
	for _, c := range w.my {
		c.Close()
	}
	for _, c := range w.pg {
		c.Close(ctx)
	}
}

// openLoop inserts rows at a fixed rate for d, whatever the server's response time (the
// schedule does not wait for slow commits: a commit that falls behind leaves its slot late, and
// the writer counts how far behind it ran). ids start at first.
type openLoop struct {
	rate      float64
	sent      atomic.Int64
	maxBehind atomic.Int64  // nanoseconds the schedule was behind at worst
	elapsed   time.Duration // from the first due time to the last commit
	errs      atomic.Value
}

func (w *writers) runOpenLoop(ctx context.Context, rate float64, d time.Duration, first int64) *openLoop {
	ol := &openLoop{rate: rate}
	conns := len(w.my) + len(w.pg)
	jobs := make(chan int64, conns*4)
	var wg sync.WaitGroup
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range jobs {
				if err := w.insert(ctx, i, id); err != nil {
					ol.errs.Store(err)
					continue
				}
				ol.sent.Add(1)
			}
		}()
	}
	total := int64(rate * d.Seconds())
	for i := int64(0); i < total; i++ {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			select {
			case <-ctx.Done():
				i = total
				continue
			case <-time.After(wait):
			}
		} else if -wait > time.Duration(ol.maxBehind.Load()) {
			ol.maxBehind.Store(int64(-wait))
		}
		jobs <- first + i
	}
	close(jobs)
	wg.Wait()
	ol.elapsed = time.Since(start)
	return ol
}

func (ol *openLoop) err() error {
	if e, ok := ol.errs.Load().(error); ok {
		return e
	}
	return nil
}
