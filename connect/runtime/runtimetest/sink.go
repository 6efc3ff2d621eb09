package runtimetest

import (
	"context"
	"errors"
	"sync"

	"github.com/sluice-cdc/sluice/connect"
)

// Sink is an in-memory connect.Sink that keeps every record written to it. One Sink serves
// every instance its plugin builds, so a test sees the writes of all task restarts.
type Sink struct {
	// Hook, when set, is called with each batch before it is stored. A nil error stores the
	// batch; a *connect.WriteError stores all but the failed records and is returned; any
	// other error stores nothing and is returned.
	Hook func(batch []connect.Record) error

	mu      sync.Mutex
	records []connect.Record
	opens   int
	changed chan struct{}
}

// NewSink returns an empty sink.
func NewSink() *Sink { return &Sink{changed: make(chan struct{})} }

// Plugin returns a sink plugin named name whose instances all write to s.
func (s *Sink) Plugin(name string) connect.Plugin {
	return connect.Plugin{
		Name: name, Kind: connect.KindSink, Version: "test",
		NewSink: func(connect.Config, connect.Env) (connect.Sink, error) { return &sinkInstance{s}, nil },
	}
}

type sinkInstance struct{ s *Sink }

func (i *sinkInstance) Open(ctx context.Context) error {
	i.s.mu.Lock()
	i.s.opens++
	i.s.mu.Unlock()
	return nil
}

func (i *sinkInstance) Write(ctx context.Context, batch []connect.Record) error {
	s := i.s
	var err error
	if s.Hook != nil {
		err = s.Hook(batch)
	}
	var we *connect.WriteError
	if err != nil && !errors.As(err, &we) {
		return err
	}
	failed := map[int]bool{}
	if we != nil {
		for _, f := range we.Failed {
			failed[f.Index] = true
		}
	}
	s.mu.Lock()
	for j, r := range batch {
		if !failed[j] {
			r.Headers = r.Headers.Clone()
			s.records = append(s.records, r)
		}
	}
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	return err
}

func (i *sinkInstance) Close(ctx context.Context) error { return nil }

// Records returns a copy of what was written, in write order.
func (s *Sink) Records() []connect.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]connect.Record(nil), s.records...)
}

// Opens counts how many instances were opened.
func (s *Sink) Opens() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opens
}

// WaitFor waits until cond holds for the written records or ctx is done.
func (s *Sink) WaitFor(ctx context.Context, cond func(recs []connect.Record) bool) error {
	for {
		s.mu.Lock()
		ok := cond(s.records)
		ch := s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
