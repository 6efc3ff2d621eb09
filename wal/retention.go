package wal

import (
	"context"
	"errors"
	"fmt"
)

// EnforceRetention deletes, in every partition of a topic with the delete
// policy, the oldest sealed segments that are past retention.ms or beyond
// retention.bytes. The active segment is never deleted. Run calls it
// periodically.
func (l *Log) EnforceRetention(ctx context.Context) error {
	var errs []error
	for _, p := range l.allPartitions() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !p.cfg.Delete {
			continue
		}
		if _, err := p.enforceRetention(l.now().UnixMilli()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (l *Log) allPartitions() []*partition {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []*partition
	for _, t := range l.topics {
		out = append(out, t.parts...)
	}
	return out
}

// enforceRetention returns how many segments it deleted.
func (p *partition) enforceRetention(now int64) (int, error) {
	p.maintMu.Lock()
	defer p.maintMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.failed != nil {
		return 0, nil
	}
	var total int64
	for _, s := range p.segs {
		total += s.size
	}
	drop := 0
	for _, s := range p.segs[:len(p.segs)-1] {
		if s.next > p.hw || s.base >= p.hwBase {
			break // holds entries not yet committed (replication)
		}
		byTime := p.cfg.Retention >= 0 && now-s.maxTS > p.cfg.Retention.Milliseconds()
		bySize := p.cfg.RetentionBytes >= 0 && total-s.size >= p.cfg.RetentionBytes
		if !byTime && !bySize {
			break
		}
		total -= s.size
		drop++
	}
	if drop == 0 {
		return 0, nil
	}
	if p.replicated {
		// Record the new log start (the last entry removed) before the
		// entries go, so that Raft's term lookup at FirstIndex-1 survives.
		var idx, term uint64
		for i := drop - 1; i >= 0 && idx == 0; i-- {
			var err error
			if idx, term, err = p.lastEntryOf(p.segs[i]); err != nil {
				return 0, err
			}
		}
		if idx != 0 {
			if err := p.setStart(idx, term); err != nil {
				return 0, p.fail(fmt.Errorf("record log start of %s: %w", p.name(), err))
			}
		}
		p.layoutGen++
	}
	gone := p.segs[:drop]
	p.filesMu.Lock()
	p.segs = append([]*segment(nil), p.segs[drop:]...)
	p.filesMu.Unlock()
	p.forgetRecentThrough(-1)
	// Oldest first, indexes before data: a crash leaves a contiguous log
	// whose first segment at worst lacks its indexes, which are rebuilt.
	for _, s := range gone {
		s.f.Close()
		for _, name := range []string{s.indexPath(), s.timeIndexPath(), s.path} {
			if err := p.fs.Remove(name); err != nil && !isNotExist(err) {
				return 0, p.fail(fmt.Errorf("delete segment %s: %w", s.path, err))
			}
		}
	}
	if err := p.fs.SyncDir(p.dir); err != nil {
		return 0, p.fail(fmt.Errorf("delete segments of %s: %w", p.name(), err))
	}
	p.l.logger.Info("retention deleted segments", "topic", p.topic, "partition", p.id, "segments", drop, "log_start", p.segs[0].base)
	return drop, nil
}
