package runtimetest

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluice-cdc/sluice/connect"
)

// View is an in-memory keyed view (the JSON of each key → the JSON of its latest value; a
// tombstone deletes) with generations, whose instances implement connect.Rebuilder: a rebuild
// writes a fresh generation, FinishRebuild makes it live. One View serves every instance its
// plugin builds.
type View struct {
	mu    sync.Mutex
	gens  map[int]map[string]string
	live  int
	next  int
	wrote int
}

// NewView returns an empty view.
func NewView() *View { return &View{gens: map[int]map[string]string{}} }

// Plugin returns a sink plugin named name whose instances write to v.
func (v *View) Plugin(name string) connect.Plugin {
	return connect.Plugin{
		Name: name, Kind: connect.KindSink, Version: "test",
		NewSink: func(connect.Config, connect.Env) (connect.Sink, error) { return &viewInstance{v: v, gen: -1}, nil },
	}
}

// Live returns a copy of the live generation's rows and its number.
func (v *View) Live() (map[string]string, int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]string, len(v.gens[v.live]))
	for k, x := range v.gens[v.live] {
		out[k] = x
	}
	return out, v.live
}

// Generations returns how many generations exist (live, rebuilt, not yet aborted).
func (v *View) Generations() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.gens)
}

type viewInstance struct {
	v   *View
	gen int // -1: the live generation, whichever it is
}

func (i *viewInstance) Open(context.Context) error  { return nil }
func (i *viewInstance) Close(context.Context) error { return nil }

func (i *viewInstance) Write(_ context.Context, batch []connect.Record) error {
	v := i.v
	v.mu.Lock()
	defer v.mu.Unlock()
	g := i.gen
	if g < 0 {
		g = v.live
	}
	if v.gens[g] == nil {
		v.gens[g] = map[string]string{}
	}
	for _, r := range batch {
		k, err := connect.AppendJSON(nil, r.Key)
		if err != nil {
			return err
		}
		if r.Value == nil {
			delete(v.gens[g], string(k))
			continue
		}
		val, err := connect.AppendJSON(nil, r.Value)
		if err != nil {
			return err
		}
		v.gens[g][string(k)] = string(val)
	}
	v.wrote++
	return nil
}

// BeginRebuild implements connect.Rebuilder.
func (i *viewInstance) BeginRebuild(context.Context) (connect.Sink, error) {
	v := i.v
	v.mu.Lock()
	defer v.mu.Unlock()
	v.next = max(v.next, v.live) + 1
	v.gens[v.next] = map[string]string{}
	return &viewInstance{v: v, gen: v.next}, nil
}

func (i *viewInstance) rebuilt(s connect.Sink) (*viewInstance, error) {
	r, ok := s.(*viewInstance)
	if !ok || r.v != i.v || r.gen < 0 {
		return nil, fmt.Errorf("%T is not a rebuilt view", s)
	}
	return r, nil
}

// FinishRebuild implements connect.Rebuilder.
func (i *viewInstance) FinishRebuild(_ context.Context, s connect.Sink) error {
	r, err := i.rebuilt(s)
	if err != nil {
		return err
	}
	i.v.mu.Lock()
	defer i.v.mu.Unlock()
	delete(i.v.gens, i.v.live)
	i.v.live = r.gen
	return nil
}

// AbortRebuild implements connect.Rebuilder.
func (i *viewInstance) AbortRebuild(_ context.Context, s connect.Sink) error {
	r, err := i.rebuilt(s)
	if err != nil {
		return err
	}
	i.v.mu.Lock()
	defer i.v.mu.Unlock()
	delete(i.v.gens, r.gen)
	return nil
}
