package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-cdc/sluice/connect/rest"
)

// sluice snapshots: incremental snapshots of a source connector through the admin API.

// snapshotStatusJSON is GET /connectors/{c}/snapshots (sources/snapshot.Status).
type snapshotStatusJSON struct {
	Name            string `json:"name"`
	State           string `json:"state"`
	Throttled       string `json:"throttled_by"`
	ChunkID         uint64 `json:"chunk_id"`
	RemainingTables int    `json:"remaining_table_count"`
	Tables          []struct {
		Table         string   `json:"table"`
		Type          string   `json:"type"`
		State         string   `json:"state"`
		Filter        string   `json:"filter"`
		RowsScanned   int64    `json:"rows_scanned"`
		TotalEstimate int64    `json:"total_estimate"`
		Percent       float64  `json:"percent"`
		RowsPerSecond float64  `json:"rows_per_second"`
		ETASeconds    *float64 `json:"eta_seconds"`
	} `json:"tables"`
}

// conditions is a repeatable --filter TABLE=CONDITION flag.
type conditions []string

func (c *conditions) String() string     { return strings.Join(*c, ";") }
func (c *conditions) Set(v string) error { *c = append(*c, v); return nil }

func cmdSnapshots(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{"snapshots: want start, status, pause, resume or stop"}
	}
	fs, cf := clientFlagSet("snapshots")
	var filters conditions
	fs.Var(&filters, "filter", "start: TABLE=CONDITION, a WHERE condition limiting one table's rows (repeatable)")
	chunk := fs.Int("chunk-size", 0, "start: rows per chunk (default: the connector's incremental.snapshot.chunk.size)")
	blocking := fs.Bool("blocking", false, "start: a blocking snapshot (the stream waits while the tables are read)")
	surrogate := fs.String("surrogate-key", "", "start: read in the order of this unique column instead of the primary key")
	watch := fs.Bool("watch", false, "status: show live progress until the snapshot is done")
	interval := fs.Duration("interval", time.Second, "status --watch: time between refreshes")
	pos, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	sub := args[0]
	if len(pos) == 0 {
		return usageError{fmt.Sprintf("snapshots %s: want a CONNECTOR", sub)}
	}
	name, tables := pos[0], pos[1:]
	path := rest.Path("connectors", name, "snapshots")
	switch sub {
	case "start":
		if len(tables) == 0 {
			return usageError{"snapshots start: want CONNECTOR TABLE... (regular expressions of <schema>.<table> names)"}
		}
		body := map[string]any{"data-collections": tables}
		if *blocking {
			body["type"] = "blocking"
		}
		if *chunk != 0 {
			body["chunk-size"] = *chunk
		}
		if *surrogate != "" {
			body["surrogate-key"] = *surrogate
		}
		var conds []map[string]string
		for _, f := range filters {
			table, cond, ok := strings.Cut(f, "=")
			if !ok || strings.TrimSpace(table) == "" || strings.TrimSpace(cond) == "" {
				return usageError{fmt.Sprintf("--filter %q: want TABLE=CONDITION, e.g. --filter \"public.orders=region = 'eu'\"", f)}
			}
			conds = append(conds, map[string]string{"data-collection": strings.TrimSpace(table), "filter": strings.TrimSpace(cond)})
		}
		if conds != nil {
			body["additional-conditions"] = conds
		}
		return cf.snapshotCall(stdout, "POST", path, body, fmt.Sprintf("snapshot of %s requested on %s; follow it with: sluice snapshots status %s --watch", strings.Join(tables, ", "), name, name))
	case "pause", "resume":
		if len(tables) > 0 {
			return usageError{fmt.Sprintf("unexpected argument %q", tables[0])}
		}
		return cf.snapshotCall(stdout, "PUT", path+"/"+sub, nil, fmt.Sprintf("snapshot of %s: %s requested", name, sub))
	case "stop":
		var body any
		done := fmt.Sprintf("snapshot of %s: stop requested for every table", name)
		if len(tables) > 0 {
			body = map[string]any{"data-collections": tables}
			done = fmt.Sprintf("snapshot of %s: stop requested for %s", name, strings.Join(tables, ", "))
		}
		return cf.snapshotCall(stdout, "DELETE", path, body, done)
	case "status":
		if len(tables) > 0 {
			return usageError{fmt.Sprintf("unexpected argument %q", tables[0])}
		}
		if !*watch {
			return cf.show(stdout, path, func(raw json.RawMessage) error {
				var st snapshotStatusJSON
				if err := json.Unmarshal(raw, &st); err != nil {
					return err
				}
				return renderSnapshots(stdout, st, false)
			})
		}
		if *interval < 100*time.Millisecond {
			return usageError{"--interval must be at least 100ms"}
		}
		return cf.watchSnapshots(stdout, path, *interval)
	}
	return usageError{fmt.Sprintf("snapshots: unknown subcommand %q", sub)}
}

// snapshotCall sends a request and prints done (or the status with -o json).
func (cf *clientFlags) snapshotCall(w io.Writer, method, path string, body any, done string) error {
	ctx, cancel := signalContext()
	defer cancel()
	var raw json.RawMessage
	if _, err := cf.client().Do(ctx, method, path, body, &raw); err != nil {
		return err
	}
	if cf.output == "json" {
		return printJSON(w, raw)
	}
	fmt.Fprintln(w, done)
	return nil
}

// watchSnapshots redraws the status until no table is left (or Ctrl-C). On a terminal the
// table is redrawn in place; otherwise each refresh is printed after the last.
func (cf *clientFlags) watchSnapshots(w io.Writer, path string, every time.Duration) error {
	ctx, cancel := signalContext()
	defer cancel()
	tty := isTerminal(w)
	lines := 0
	c := cf.client()
	for {
		var raw json.RawMessage
		if _, err := c.Do(ctx, "GET", path, nil, &raw); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		var st snapshotStatusJSON
		if err := json.Unmarshal(raw, &st); err != nil {
			return err
		}
		var b strings.Builder
		if cf.output == "json" {
			b.Write(raw)
			b.WriteByte('\n')
		} else if err := renderSnapshots(&b, st, true); err != nil {
			return err
		}
		if tty && lines > 0 {
			fmt.Fprintf(w, "\x1b[%dA\x1b[J", lines)
		}
		io.WriteString(w, b.String())
		lines = strings.Count(b.String(), "\n")
		if st.RemainingTables == 0 && st.State == "IDLE" {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// renderSnapshots prints the status: a summary line and one line per table, with a progress
// bar when bar is set.
func renderSnapshots(w io.Writer, st snapshotStatusJSON, bar bool) error {
	state := st.State
	if st.Throttled != "" {
		state += " by " + st.Throttled
	}
	fmt.Fprintf(w, "%s: %s, %d chunk(s) read, %d table(s) left\n", st.Name, state, st.ChunkID, st.RemainingTables)
	if len(st.Tables) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tTYPE\tSTATE\tPROGRESS\tROWS\tRATE\tETA")
	for _, t := range st.Tables {
		progress := fmt.Sprintf("%5.1f%%", t.Percent)
		if bar {
			progress = progressBar(t.Percent, 20) + " " + progress
		}
		rows := thousands(t.RowsScanned)
		if t.TotalEstimate >= 0 && t.State != "SUCCEEDED" && t.State != "STOPPED" && t.State != "SKIPPED" {
			rows += "/~" + thousands(t.TotalEstimate)
		}
		rate, eta := "-", "-"
		if t.RowsPerSecond > 0 {
			rate = thousands(int64(math.Round(t.RowsPerSecond))) + "/s"
		}
		if t.ETASeconds != nil {
			eta = (time.Duration(*t.ETASeconds) * time.Second).String()
		}
		typ := t.Type
		if typ == "" {
			typ = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Table, typ, t.State, progress, rows, rate, eta)
	}
	return tw.Flush()
}

// progressBar draws [#####.....] for a percentage.
func progressBar(percent float64, width int) string {
	n := int(math.Round(percent / 100 * float64(width)))
	n = max(0, min(width, n))
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}

// thousands writes n with thousands separators: 1234567 → 1,234,567.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
