package main

import (
	"context"
	"fmt"
)

// w5 is W1 again on a 3-node replicated log on loopback (node 1 runs the connectors; every
// append is fsynced on two of the three before it is acknowledged), on the same backlog: the
// MariaDB binlog read again, and a PostgreSQL slot made with W1's.
func (b *bench) w5(ctx context.Context) error {
	var errs []error
	if err := b.ensureMyBacklog(ctx); err != nil {
		errs = append(errs, fmt.Errorf("mariadb: %w", err))
	} else {
		p := b.newPipe("mysql", "my5", "w1")
		p.ServerID, p.SnapshotMode, p.Sinks = 5403, "never", true
		if err := b.runDrain(ctx, "W5", "mariadb", p, limMyDecode, false, true); err != nil {
			errs = append(errs, fmt.Errorf("mariadb: %w", err))
		}
		b.compareW1("mariadb")
	}
	if err := b.ensurePGBacklog(ctx); err != nil {
		errs = append(errs, fmt.Errorf("postgres: %w", err))
	} else {
		p := b.newPipe("postgres", "pg5", "w1")
		p.Slot, p.Publication, p.SnapshotMode, p.Sinks = b.pgBacklog.slots["w5"], b.pgBacklog.pub, "no_data", true
		if err := b.runDrain(ctx, "W5", "postgres", p, limPGDecode, false, true); err != nil {
			errs = append(errs, fmt.Errorf("postgres: %w", err))
		}
		b.compareW1("postgres")
	}
	b.note("W5: CPU and RSS figures are those of node 1 (which runs the connectors and leads or follows per partition); nodes 2 and 3 replicate only")
	return joinErrs(errs)
}

// compareW1 records W5's rates as ratios of W1's.
func (b *bench) compareW1(src string) {
	for _, name := range []string{": source into the log", ": end to end (log and both views)"} {
		var w1, w5 float64
		for _, f := range b.rep.Figures {
			if f.Name == src+name {
				switch f.Workload {
				case "W1":
					w1 = f.Value
				case "W5":
					w5 = f.Value
				}
			}
		}
		if w1 > 0 && w5 > 0 {
			b.rep.Figures = append(b.rep.Figures, figure{Workload: "W5", Name: src + name + ", 3 nodes / 1 node", Value: w5 / w1, Unit: "ratio", Note: fmt.Sprintf("%s / %s rows/s", num(w5), num(w1))})
			b.progress("W5 %s%s: %.2f of the single node's", src, name, w5/w1)
		}
	}
}
