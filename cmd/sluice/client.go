package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sluice-cdc/sluice/connect/rest"
)

// Client commands: thin wrappers of the admin API, tables for people and -o json for scripts.

type clientFlags struct {
	server, token, output string
	insecure              bool
}

func clientFlagSet(name string) (*flag.FlagSet, *clientFlags) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	cf := &clientFlags{}
	server := os.Getenv("SLUICE_SERVER")
	if server == "" {
		server = "http://127.0.0.1:8083"
	}
	fs.StringVar(&cf.server, "server", server, "the admin API's URL")
	fs.StringVar(&cf.token, "token", os.Getenv("SLUICE_TOKEN"), "the API token")
	fs.StringVar(&cf.output, "o", "table", "output: table or json")
	fs.BoolVar(&cf.insecure, "insecure", false, "skip TLS certificate verification")
	return fs, cf
}

func (cf *clientFlags) check() error {
	if cf.output != "table" && cf.output != "json" {
		return usageError{fmt.Sprintf("-o %q: want table or json", cf.output)}
	}
	return nil
}

func (cf *clientFlags) client() *rest.Client { return rest.NewClient(cf.server, cf.token, cf.insecure) }

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
}

// printJSON writes raw JSON indented.
func printJSON(w io.Writer, raw json.RawMessage) error {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		_, err = w.Write(raw)
		return err
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}

// get calls GET path and prints the raw answer with -o json, or hands it to table.
func (cf *clientFlags) show(w io.Writer, path string, table func(raw json.RawMessage) error) error {
	ctx, cancel := signalContext()
	defer cancel()
	var raw json.RawMessage
	if _, err := cf.client().Do(ctx, "GET", path, nil, &raw); err != nil {
		return err
	}
	if cf.output == "json" || table == nil {
		return printJSON(w, raw)
	}
	return table(raw)
}

// call sends a request whose answer has no body or a message, and reports done.
func (cf *clientFlags) call(w io.Writer, method, path string, body any, done string) error {
	ctx, cancel := signalContext()
	defer cancel()
	var raw json.RawMessage
	if _, err := cf.client().Do(ctx, method, path, body, &raw); err != nil {
		return err
	}
	if cf.output == "json" && len(raw) > 0 {
		return printJSON(w, raw)
	}
	fmt.Fprintln(w, done)
	return nil
}

func readInput(file string) ([]byte, error) {
	if file == "" {
		return nil, usageError{"-f FILE is required (- reads standard input)"}
	}
	if file == "-" {
		return io.ReadAll(os.Stdin)
	}
	return os.ReadFile(file)
}

type statusJSON struct {
	Name      string `json:"name"`
	Type      string `json:"type"`
	Connector struct {
		State    string `json:"state"`
		WorkerID string `json:"worker_id"`
		Trace    string `json:"trace"`
	} `json:"connector"`
	Tasks []struct {
		ID       int    `json:"id"`
		State    string `json:"state"`
		WorkerID string `json:"worker_id"`
		Trace    string `json:"trace"`
	} `json:"tasks"`
}

type infoJSON struct {
	Name   string            `json:"name"`
	Type   string            `json:"type"`
	Config map[string]string `json:"config"`
}

func taskSummary(st statusJSON) string {
	if len(st.Tasks) == 0 {
		return "-"
	}
	var parts []string
	for _, t := range st.Tasks {
		parts = append(parts, t.State)
	}
	return strings.Join(parts, ",")
}

func cmdConnectors(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{"connectors: want list, get, config, status, create, delete, pause, resume, stop, restart or lag"}
	}
	fs, cf := clientFlagSet("connectors")
	file := fs.String("f", "", "create: the connector's JSON ({\"name\": ..., \"config\": {...}}), - for standard input")
	state := fs.String("state", "", "create: the initial state (RUNNING, PAUSED or STOPPED)")
	includeTasks := fs.Bool("include-tasks", false, "restart: also the tasks (Kafka Connect's includeTasks)")
	onlyFailed := fs.Bool("only-failed", false, "restart: only failed instances")
	pos, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	sub := args[0]
	one := func() (string, error) {
		if len(pos) != 1 {
			return "", usageError{fmt.Sprintf("connectors %s: want one connector NAME", sub)}
		}
		return pos[0], nil
	}
	switch sub {
	case "list", "ls":
		if len(pos) > 0 {
			return usageError{fmt.Sprintf("unexpected argument %q", pos[0])}
		}
		return cf.show(stdout, "/connectors?expand=status&expand=info", func(raw json.RawMessage) error {
			var all map[string]struct {
				Status statusJSON `json:"status"`
				Info   infoJSON   `json:"info"`
			}
			if err := json.Unmarshal(raw, &all); err != nil {
				return err
			}
			names := make([]string, 0, len(all))
			for n := range all {
				names = append(names, n)
			}
			sort.Strings(names)
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tTYPE\tCLASS\tSTATE\tTASKS")
			for _, n := range names {
				c := all[n]
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n, c.Status.Type, c.Info.Config["connector.class"], c.Status.Connector.State, taskSummary(c.Status))
			}
			return tw.Flush()
		})
	case "get", "config":
		name, err := one()
		if err != nil {
			return err
		}
		path := rest.Path("connectors", name)
		if sub == "config" {
			path += "/config"
		}
		return cf.show(stdout, path, func(raw json.RawMessage) error {
			var cfg map[string]string
			if sub == "get" {
				var info infoJSON
				if err := json.Unmarshal(raw, &info); err != nil {
					return err
				}
				fmt.Fprintf(stdout, "Name: %s\nType: %s\n", info.Name, info.Type)
				cfg = info.Config
			} else if err := json.Unmarshal(raw, &cfg); err != nil {
				return err
			}
			keys := make([]string, 0, len(cfg))
			for k := range cfg {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tVALUE")
			for _, k := range keys {
				fmt.Fprintf(tw, "%s\t%s\n", k, cfg[k])
			}
			return tw.Flush()
		})
	case "status":
		name, err := one()
		if err != nil {
			return err
		}
		return cf.show(stdout, rest.Path("connectors", name, "status"), func(raw json.RawMessage) error {
			var st statusJSON
			if err := json.Unmarshal(raw, &st); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "INSTANCE\tSTATE\tWORKER")
			fmt.Fprintf(tw, "connector %s (%s)\t%s\t%s\n", st.Name, st.Type, st.Connector.State, st.Connector.WorkerID)
			for _, t := range st.Tasks {
				fmt.Fprintf(tw, "task %d\t%s\t%s\n", t.ID, t.State, t.WorkerID)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, t := range st.Tasks {
				if t.Trace != "" {
					fmt.Fprintf(stdout, "\ntask %d trace:\n%s\n", t.ID, t.Trace)
				}
			}
			return nil
		})
	case "create":
		if len(pos) > 0 {
			return usageError{fmt.Sprintf("unexpected argument %q (the connector comes from -f)", pos[0])}
		}
		body, err := readInput(*file)
		if err != nil {
			return err
		}
		if *state != "" {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(body, &obj); err != nil {
				return fmt.Errorf("%s: %v", *file, err)
			}
			obj["initial_state"], _ = json.Marshal(strings.ToUpper(*state))
			body, _ = json.Marshal(obj)
		}
		ctx, cancel := signalContext()
		defer cancel()
		var info infoJSON
		if _, err := cf.client().Do(ctx, "POST", "/connectors", body, &info); err != nil {
			return err
		}
		if cf.output == "json" {
			b, _ := json.Marshal(info)
			return printJSON(stdout, b)
		}
		fmt.Fprintf(stdout, "connector %s created (%s)\n", info.Name, info.Type)
		return nil
	case "delete", "rm":
		name, err := one()
		if err != nil {
			return err
		}
		return cf.call(stdout, "DELETE", rest.Path("connectors", name), nil, "connector "+name+" deleted")
	case "pause", "resume", "stop":
		name, err := one()
		if err != nil {
			return err
		}
		past := map[string]string{"pause": "paused", "resume": "resumed", "stop": "stopped"}[sub]
		return cf.call(stdout, "PUT", rest.Path("connectors", name, sub), nil, "connector "+name+" "+past)
	case "restart":
		name, err := one()
		if err != nil {
			return err
		}
		q := url.Values{}
		if *includeTasks {
			q.Set("includeTasks", "true")
		}
		if *onlyFailed {
			q.Set("onlyFailed", "true")
		}
		path := rest.Path("connectors", name, "restart")
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		return cf.call(stdout, "POST", path, nil, "connector "+name+" restarted")
	case "lag":
		name, err := one()
		if err != nil {
			return err
		}
		return cf.show(stdout, rest.Path("connectors", name, "lag"), func(raw json.RawMessage) error {
			var l struct {
				Type       string `json:"type"`
				Total      *int64 `json:"total_lag"`
				Partitions []struct {
					Topic     string `json:"topic"`
					Partition int32  `json:"partition"`
					Committed int64  `json:"committed_offset"`
					End       int64  `json:"end_offset"`
					Lag       int64  `json:"lag"`
				} `json:"partitions"`
				Position json.RawMessage `json:"position"`
				Behind   *int64          `json:"milliseconds_behind_source"`
			}
			if err := json.Unmarshal(raw, &l); err != nil {
				return err
			}
			if l.Type != "sink" {
				fmt.Fprintf(stdout, "position: %s\n", orNone(l.Position))
				if l.Behind != nil {
					fmt.Fprintf(stdout, "milliseconds behind source: %d\n", *l.Behind)
				}
				return nil
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG")
			for _, p := range l.Partitions {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", p.Topic, p.Partition, p.Committed, p.End, p.Lag)
			}
			if l.Total != nil {
				fmt.Fprintf(tw, "total\t\t\t\t%d\n", *l.Total)
			}
			return tw.Flush()
		})
	}
	return usageError{fmt.Sprintf("connectors: unknown subcommand %q", sub)}
}

func orNone(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "none"
	}
	return string(raw)
}

func cmdOffsets(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{"offsets: want get, set or reset"}
	}
	fs, cf := clientFlagSet("offsets")
	file := fs.String("f", "", "set: the offsets' JSON ({\"offsets\": [...]}), - for standard input")
	pos, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{fmt.Sprintf("offsets %s: want one CONNECTOR", args[0])}
	}
	name := pos[0]
	path := rest.Path("connectors", name, "offsets")
	switch args[0] {
	case "get":
		return cf.show(stdout, path, func(raw json.RawMessage) error {
			var o struct {
				Offsets []struct {
					Partition map[string]any  `json:"partition"`
					Offset    json.RawMessage `json:"offset"`
				} `json:"offsets"`
			}
			if err := json.Unmarshal(raw, &o); err != nil {
				return err
			}
			if len(o.Offsets) == 0 {
				fmt.Fprintln(stdout, "no offsets (the connector starts from the beginning)")
				return nil
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PARTITION\tOFFSET")
			for _, e := range o.Offsets {
				p, _ := json.Marshal(e.Partition)
				fmt.Fprintf(tw, "%s\t%s\n", p, e.Offset)
			}
			return tw.Flush()
		})
	case "set", "alter":
		body, err := readInput(*file)
		if err != nil {
			return err
		}
		return cf.call(stdout, "PATCH", path, body, "offsets of "+name+" set")
	case "reset":
		return cf.call(stdout, "DELETE", path, nil, "offsets of "+name+" reset")
	}
	return usageError{fmt.Sprintf("offsets: unknown subcommand %q", args[0])}
}

func cmdPlugins(args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "list" {
		return usageError{"plugins: want list"}
	}
	fs, cf := clientFlagSet("plugins")
	all := fs.Bool("all", false, "include transforms and predicates")
	if _, err := parse(fs, args[1:]); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	path := "/connector-plugins"
	if *all {
		path += "?connectorsOnly=false"
	}
	return cf.show(stdout, path, func(raw json.RawMessage) error {
		var ps []struct{ Class, Type, Version string }
		if err := json.Unmarshal(raw, &ps); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CLASS\tTYPE\tVERSION")
		for _, p := range ps {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Class, p.Type, p.Version)
		}
		return tw.Flush()
	})
}

// cmdTopicsAPI serves `sluice topics` through the API (when no -c or --log-dir is given).
func cmdTopicsAPI(args []string, stdout io.Writer) error {
	fs, cf := clientFlagSet("topics")
	partition := fs.Int("partition", 0, "records: the partition")
	offset := fs.Int64("offset", -1, "records: the first offset (default the partition's start)")
	limit := fs.Int("limit", 20, "records: how many")
	pos, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	switch args[0] {
	case "list":
		return cf.show(stdout, "/topics", func(raw json.RawMessage) error {
			var ts []struct {
				Name       string `json:"name"`
				Partitions int    `json:"partitions"`
				Records    int64  `json:"records"`
				SizeBytes  int64  `json:"size_bytes"`
			}
			if err := json.Unmarshal(raw, &ts); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tRECORDS\tBYTES")
			for _, t := range ts {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\n", t.Name, t.Partitions, t.Records, t.SizeBytes)
			}
			return tw.Flush()
		})
	case "describe":
		if len(pos) != 1 {
			return usageError{"topics describe: want one TOPIC"}
		}
		return cf.show(stdout, rest.Path("topics", pos[0]), func(raw json.RawMessage) error {
			var t struct {
				Name       string            `json:"name"`
				Config     map[string]string `json:"config"`
				Partitions []struct {
					Partition      int32 `json:"partition"`
					LogStartOffset int64 `json:"log_start_offset"`
					HighWatermark  int64 `json:"high_watermark"`
					SizeBytes      int64 `json:"size_bytes"`
					Segments       int   `json:"segments"`
				} `json:"partitions"`
			}
			if err := json.Unmarshal(raw, &t); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PARTITION\tSTART\tHIGH-WATERMARK\tBYTES\tSEGMENTS")
			for _, p := range t.Partitions {
				fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\n", p.Partition, p.LogStartOffset, p.HighWatermark, p.SizeBytes, p.Segments)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			keys := make([]string, 0, len(t.Config))
			for k := range t.Config {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			fmt.Fprintln(stdout, "\nCONFIG")
			for _, k := range keys {
				fmt.Fprintf(stdout, "  %s=%s\n", k, t.Config[k])
			}
			return nil
		})
	case "records":
		if len(pos) != 1 {
			return usageError{"topics records: want one TOPIC"}
		}
		q := url.Values{}
		q.Set("limit", strconv.Itoa(*limit))
		if *offset >= 0 {
			q.Set("offset", strconv.FormatInt(*offset, 10))
		}
		path := rest.Path("topics", pos[0], "partitions", strconv.Itoa(*partition), "records") + "?" + q.Encode()
		ctx, cancel := signalContext()
		defer cancel()
		var page struct {
			Records []json.RawMessage `json:"records"`
		}
		var raw json.RawMessage
		if _, err := cf.client().Do(ctx, "GET", path, nil, &raw); err != nil {
			return err
		}
		if cf.output == "json" {
			return printJSON(stdout, raw)
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return err
		}
		for _, r := range page.Records {
			fmt.Fprintf(stdout, "%s\n", r)
		}
		return nil
	}
	return usageError{fmt.Sprintf("topics: unknown subcommand %q", args[0])}
}

func cmdRebuild(args []string, stdout io.Writer) error {
	fs, cf := clientFlagSet("rebuild")
	noWait := fs.Bool("no-wait", false, "start the rebuild and return")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{"rebuild: want one CONNECTOR"}
	}
	name := pos[0]
	ctx, cancel := signalContext()
	defer cancel()
	type status struct {
		State    string `json:"state"`
		Phase    string `json:"phase"`
		Replayed int64  `json:"replayed_records"`
		Target   int64  `json:"target_records"`
		Error    string `json:"error"`
	}
	var st status
	c := cf.client()
	if _, err := c.Do(ctx, "POST", rest.Path("connectors", name, "rebuild"), nil, &st); err != nil {
		return err
	}
	if *noWait {
		fmt.Fprintf(stdout, "rebuild of %s started\n", name)
		return nil
	}
	last := time.Time{}
	for st.State == "RUNNING" || st.State == "ABORTING" {
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped waiting; the rebuild goes on (sluice connectors lag %s, GET /connectors/%s/rebuild)", name, name)
		case <-time.After(500 * time.Millisecond):
		}
		if _, err := c.Do(ctx, "GET", rest.Path("connectors", name, "rebuild"), nil, &st); err != nil {
			return err
		}
		if cf.output == "table" && time.Since(last) > 5*time.Second {
			fmt.Fprintf(stdout, "rebuild of %s: %s, %d of %d records replayed\n", name, st.Phase, st.Replayed, st.Target)
			last = time.Now()
		}
	}
	if cf.output == "json" {
		b, _ := json.Marshal(st)
		return printJSON(stdout, b)
	}
	if st.State != "DONE" {
		return fmt.Errorf("rebuild of %s %s: %s (the live view is untouched)", name, strings.ToLower(st.State), st.Error)
	}
	fmt.Fprintf(stdout, "rebuild of %s done: %d records replayed; the view was switched\n", name, st.Replayed)
	return nil
}

func cmdWait(args []string, stdout io.Writer) error {
	fs, cf := clientFlagSet("wait")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait")
	source := fs.String("source", "", "the source connector whose position it is (default: the one that fits)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if len(pos) != 2 {
		return usageError{"wait: want CONNECTOR POSITION"}
	}
	q := url.Values{}
	q.Set("position", pos[1])
	q.Set("timeout", timeout.String())
	if *source != "" {
		q.Set("source", *source)
	}
	return cf.show(stdout, rest.Path("connectors", pos[0], "wait")+"?"+q.Encode(), func(raw json.RawMessage) error {
		var w struct {
			Source   string `json:"source"`
			WaitedMs int64  `json:"waited_ms"`
		}
		if err := json.Unmarshal(raw, &w); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "the view of %s includes %s (position of %s) after %dms\n", pos[0], pos[1], w.Source, w.WaitedMs)
		return nil
	})
}
