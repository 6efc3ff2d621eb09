package runtime

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/wal"
)

// Read-your-writes: a client writes to its database, asks the database for its position (see
// positions.go), and waits until a sink's view includes it. WaitFor waits in two steps:
//
//  1. until the source connector has appended a batch whose position is at or past the given
//     one: every change up to it is in the log;
//  2. until the sink's committed offsets reach the ends its partitions had at that moment:
//     every such change has been written to the view (offsets are committed after the write).

// WaitError is a wait that cannot be served: an unknown position format or no single source.
type WaitError struct{ Msg string }

func (e *WaitError) Error() string { return e.Msg }

// WaitTimeoutError is a wait that ran out of time; it says how far the pipeline got.
type WaitTimeoutError struct {
	Sink, Source, Position string
	// Stage is "source" when the source had not reached the position, "sink" when the view
	// had not caught up with the log.
	Stage  string
	Detail string
	Err    error // ctx's error
}

func (e *WaitTimeoutError) Error() string {
	if e.Stage == "source" {
		return fmt.Sprintf("the source %s has not reached position %s yet (%s)", e.Source, e.Position, e.Detail)
	}
	return fmt.Sprintf("the view of %s has not caught up with position %s of %s yet (%s)", e.Sink, e.Position, e.Source, e.Detail)
}

func (e *WaitTimeoutError) Unwrap() error { return e.Err }

// WaitResult is a wait that succeeded.
type WaitResult struct {
	// Source is the source connector whose position was waited for.
	Source string
	// Offsets are the sink's committed offsets that include the position.
	Offsets map[TopicPartition]int64
}

// WaitFor blocks until sink's view includes position, a position of the source connector named
// source ("" picks the one source whose positions look like position and that feeds the sink),
// or until ctx ends (a *WaitTimeoutError).
func (rt *Runtime) WaitFor(ctx context.Context, sink, source, position string) (WaitResult, error) {
	sc, err := rt.get(sink)
	if err != nil {
		return WaitResult{}, err
	}
	sChk := sc.checked()
	if sChk.Plugin.Kind != connect.KindSink {
		return WaitResult{}, &WaitError{Msg: fmt.Sprintf("connector %s is a %s: wait on the sink connector whose view you read", sink, sChk.Plugin.Kind)}
	}
	src, target, err := rt.waitSource(sChk, source, position)
	if err != nil {
		return WaitResult{}, err
	}
	res := WaitResult{Source: src.Name}
	// Step 1: the source.
	var last connect.Position
	for {
		changed := rt.progress.changed()
		pos, live, err := rt.sourcePosition(ctx, src)
		if err != nil {
			return res, err
		}
		last = pos
		if target(pos) {
			break
		}
		if err := waitChange(ctx, changed, live); err != nil {
			detail := "it is at " + describePosition(last)
			if st := src.status(rt.opts.WorkerID); len(st.Tasks) == 0 || st.Tasks[0].State != StateRunning {
				detail += fmt.Sprintf("; its task is %s", taskState(st))
			}
			return res, &WaitTimeoutError{Sink: sink, Source: src.Name, Position: position, Stage: "source", Detail: detail, Err: err}
		}
	}
	// Step 2: the sink.
	ends := map[TopicPartition]int64{}
	match := topicMatcher(sChk.Config)
	for _, topic := range rt.opts.Log.Topics() {
		if !match(topic) {
			continue
		}
		n, err := partitionCount(rt.opts.Log, topic)
		if errors.Is(err, wal.ErrUnknownTopic) {
			continue
		}
		if err != nil {
			return res, err
		}
		for p := range n {
			start, end, err := bounds(ctx, rt.opts.Log, topic, p)
			if err != nil {
				return res, err
			}
			if end > start {
				ends[TopicPartition{Topic: topic, Partition: p}] = end
			}
		}
	}
	for {
		changed := rt.progress.changed()
		committed, err := rt.opts.Log.FetchOffsets(SinkGroup(sink))
		if err != nil {
			return res, err
		}
		var behind []string
		for tp, end := range ends {
			if committed[tp] < end {
				behind = append(behind, fmt.Sprintf("%s-%d at %d of %d", tp.Topic, tp.Partition, max(committed[tp], 0), end))
			}
		}
		if len(behind) == 0 {
			res.Offsets = map[TopicPartition]int64{}
			for tp := range ends {
				res.Offsets[tp] = committed[tp]
			}
			return res, nil
		}
		if err := waitChange(ctx, changed, true); err != nil {
			sort.Strings(behind)
			detail := "behind: " + strings.Join(behind, ", ")
			if st := sc.status(rt.opts.WorkerID); len(st.Tasks) == 0 || st.Tasks[0].State != StateRunning {
				detail += fmt.Sprintf("; its task is %s", taskState(st))
			}
			return res, &WaitTimeoutError{Sink: sink, Source: src.Name, Position: position, Stage: "sink", Detail: detail, Err: err}
		}
	}
}

func taskState(st Status) State {
	if len(st.Tasks) == 0 {
		return st.Connector.State
	}
	return st.Tasks[0].State
}

func describePosition(p connect.Position) string {
	if p.IsZero() {
		return "its start"
	}
	if len(p.State) > 0 {
		return string(p.State)
	}
	return p.String()
}

// waitChange waits for a progress signal, or a second when polling (a stopped task's committed
// position may change under an offsets alteration without a signal).
func waitChange(ctx context.Context, changed <-chan struct{}, signalled bool) error {
	poll := time.Second
	if !signalled {
		poll = 200 * time.Millisecond
	}
	t := time.NewTimer(poll)
	defer t.Stop()
	select {
	case <-changed:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sourcePosition returns the end of the newest batch a source appended (live) or, when no
// task runs, its committed position.
func (rt *Runtime) sourcePosition(ctx context.Context, c *connector) (connect.Position, bool, error) {
	c.mu.Lock()
	live, pos := c.instance != nil, c.appended
	c.mu.Unlock()
	if live {
		return pos, true, nil
	}
	pos, err := committedPosition(ctx, rt.opts.Log, c.Name, nil)
	return pos, false, err
}

// waitSource finds the source connector of a wait and parses its position.
func (rt *Runtime) waitSource(sink Checked, source, position string) (*connector, func(connect.Position) bool, error) {
	if source != "" {
		c, err := rt.get(source)
		if err != nil {
			return nil, nil, err
		}
		p := c.checked().Plugin
		if p.Kind != connect.KindSource {
			return nil, nil, &WaitError{Msg: fmt.Sprintf("source: connector %s is a %s, not a source", source, p.Kind)}
		}
		t, err := ParseWaitTarget(p.Name, position)
		if err != nil {
			return nil, nil, &WaitError{Msg: "position: " + err.Error()}
		}
		return c, t, nil
	}
	type cand struct {
		c *connector
		t func(connect.Position) bool
	}
	var all []cand
	var reasons []string
	for _, name := range rt.Names() {
		c, err := rt.get(name)
		if err != nil {
			continue
		}
		p := c.checked().Plugin
		if p.Kind != connect.KindSource {
			continue
		}
		t, err := ParseWaitTarget(p.Name, position)
		if err != nil {
			reasons = append(reasons, name+": "+err.Error())
			continue
		}
		all = append(all, cand{c, t})
	}
	if len(all) > 1 {
		match := topicMatcher(sink.Config)
		var feeding []cand
		for _, x := range all {
			topics, _ := rt.ActiveTopics(x.c.Name)
			for _, tp := range topics {
				if match(tp) {
					feeding = append(feeding, x)
					break
				}
			}
		}
		if len(feeding) > 0 {
			all = feeding
		}
	}
	switch len(all) {
	case 1:
		return all[0].c, all[0].t, nil
	case 0:
		msg := fmt.Sprintf("position: no source connector has positions like %q", position)
		if len(reasons) > 0 {
			msg += " (" + strings.Join(reasons, "; ") + ")"
		}
		return nil, nil, &WaitError{Msg: msg}
	}
	names := make([]string, len(all))
	for i, x := range all {
		names[i] = x.c.Name
	}
	return nil, nil, &WaitError{Msg: fmt.Sprintf("source: several source connectors (%s) may have written position %q; name one with source=<connector>", strings.Join(names, ", "), position)}
}
