// Command sluice runs change-data-capture pipelines; see README.md.
//
//	sluice run -c pipeline.yaml         run the pipeline until SIGTERM / SIGINT
//	sluice validate -c pipeline.yaml    check the pipeline, print every problem (exit 1 if any)
//	sluice topics list -c pipeline.yaml
//	sluice topics tail <topic> [--from-beginning] [--partition N] [--max-messages N] -c pipeline.yaml
//	sluice version
//
// Exit codes: 0 success, 1 failure (invalid pipeline, log or runtime error), 2 usage error.
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/connect/rest"
	"github.com/sluice-cdc/sluice/connect/runtime"
	"github.com/sluice-cdc/sluice/sinks/elasticsearch"
	"github.com/sluice-cdc/sluice/sinks/file"
	"github.com/sluice-cdc/sluice/sinks/redis"
	"github.com/sluice-cdc/sluice/sources/datagen"
	"github.com/sluice-cdc/sluice/sources/mysql"
	"github.com/sluice-cdc/sluice/sources/postgres"
	"github.com/sluice-cdc/sluice/transforms"
	"github.com/sluice-cdc/sluice/wal"
	"github.com/sluice-cdc/sluice/wal/vfs"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

const usage = `usage:
  sluice run -c PIPELINE [-c PIPELINE...] [--log-format text|json] [--log-level LEVEL]
  sluice validate -c PIPELINE [-c PIPELINE...]
  sluice topics list (-c PIPELINE | --log-dir DIR)
  sluice topics tail TOPIC [--from-beginning] [--partition N] [--max-messages N] (-c PIPELINE | --log-dir DIR)
  sluice version
Client commands (they call the admin API of a running sluice):
  sluice connectors list|get|status|config|create -f FILE|delete|pause|resume|stop|restart|lag [NAME]
  sluice offsets get|set -f FILE|reset CONNECTOR
  sluice topics list|describe|records [TOPIC] [--partition N] [--offset N] [--limit N]
  sluice plugins list
  sluice rebuild CONNECTOR [--no-wait]
  sluice wait CONNECTOR POSITION [--timeout 30s] [--source NAME]
  sluice snapshots start CONNECTOR TABLE... [--filter TABLE=CONDITION] [--chunk-size N] [--blocking]
  sluice snapshots status CONNECTOR [--watch] | pause CONNECTOR | resume CONNECTOR | stop CONNECTOR [TABLE...]
  client flags: [--server URL] [--token TOKEN] [-o table|json] [--insecure]
PIPELINE is a YAML file or a directory of them. --server defaults to $SLUICE_SERVER, else
http://127.0.0.1:8083; --token to $SLUICE_TOKEN.
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// usageError is a bad command line: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "run":
		err = cmdRun(args[1:], stderr)
	case "validate":
		err = cmdValidate(args[1:], stdout)
	case "topics":
		err = cmdTopics(args[1:], stdout)
	case "connectors", "connector":
		err = cmdConnectors(args[1:], stdout)
	case "offsets":
		err = cmdOffsets(args[1:], stdout)
	case "plugins":
		err = cmdPlugins(args[1:], stdout)
	case "rebuild":
		err = cmdRebuild(args[1:], stdout)
	case "wait":
		err = cmdWait(args[1:], stdout)
	case "snapshots", "snapshot":
		err = cmdSnapshots(args[1:], stdout)
	case "version", "--version":
		fmt.Fprintf(stdout, "sluice %s\n", version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		err = usageError{fmt.Sprintf("unknown command %q", args[0])}
	}
	var ue usageError
	var ce config.Errors
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "sluice: %s\n%s", ue.msg, usage)
		return 2
	case errors.As(err, &ce):
		for _, e := range ce {
			fmt.Fprintln(stderr, e.Error())
		}
		fmt.Fprintf(stderr, "sluice: %d problem(s) in the pipeline\n", len(ce))
		return 1
	default:
		fmt.Fprintf(stderr, "sluice: %v\n", err)
		return 1
	}
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// parse parses flags and positional arguments in any order.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func registry() (*connect.Registry, error) {
	plugins := []connect.Plugin{datagen.Plugin(), file.Plugin(), mysql.Plugin(), postgres.Plugin(), elasticsearch.Plugin(), redis.Plugin()}
	plugins = append(plugins, transforms.Plugins()...)
	return connect.NewRegistry(plugins...)
}

func chainBuilder(reg *connect.Registry, cfg map[string]string) (connect.Transform, []connect.FieldError) {
	ch, errs := transforms.BuildChain(reg, cfg)
	if ch == nil {
		return nil, errs
	}
	return ch, errs
}

func openPipeline(paths []string) (*config.Pipeline, *connect.Registry, error) {
	if len(paths) == 0 {
		return nil, nil, usageError{"-c PIPELINE is required"}
	}
	reg, err := registry()
	if err != nil {
		return nil, nil, err
	}
	p, err := config.Open(paths, nil, runtime.Checker{Registry: reg, Chain: chainBuilder})
	return p, reg, err
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, *rest.Levels, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, nil, usageError{fmt.Sprintf("--log-level %q: want debug, info, warn or error", level)}
	}
	// The handler passes everything; the levels (changeable through /admin/loggers) filter.
	opts := &slog.HandlerOptions{Level: slog.LevelDebug - 4}
	levels := rest.NewLevels(lv)
	switch format {
	case "text":
		return slog.New(levels.Handler(slog.NewTextHandler(w, opts))), levels, nil
	case "json":
		return slog.New(levels.Handler(slog.NewJSONHandler(w, opts))), levels, nil
	}
	return nil, nil, usageError{fmt.Sprintf("--log-format %q: want text or json", format)}
}

func walOptions(p *config.Pipeline, logger *slog.Logger) (wal.Options, error) {
	topic, err := wal.ParseTopicConfig(runtime.DefaultTopicConfig(), p.Log.Topic)
	if err != nil {
		return wal.Options{}, err
	}
	topic.Partitions = p.Log.Partitions
	opts := wal.Options{Logger: logger, TopicDefaults: topic}
	if p.Log.Fsync == config.FsyncUnsafeNever {
		opts.Fsync = wal.UnsafeFsyncNever
	}
	return opts, nil
}

func openLog(dir string, opts wal.Options) (*wal.Log, error) {
	l, err := wal.Open(dir, opts)
	if errors.Is(err, vfs.ErrLocked) {
		return nil, fmt.Errorf("%w (another sluice process is using this log; stop it first)", err)
	}
	return l, err
}

func cmdRun(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var paths stringList
	fs.Var(&paths, "c", "pipeline file or directory (repeatable)")
	format := fs.String("log-format", "text", "log format: text or json")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	shutdown := fs.Duration("shutdown-timeout", 30*time.Second, "graceful stop timeout")
	forceExit := fs.Duration("force-timeout", 5*time.Second, "after a second signal (or the graceful stop timeout), exit this long after abandoning in-flight work if a task is still stuck in a call that ignores cancellation")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile (pprof) of the whole run to this file when sluice stops")
	if pos, err := parse(fs, args); err != nil {
		return err
	} else if len(pos) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", pos[0])}
	}
	logger, levels, err := newLogger(stderr, *format, *level)
	if err != nil {
		return err
	}
	// Signals are caught from here on. While sluice starts, the first cancels what can be (a
	// replicated log waits for a leader) and sluice stops once the step under way returns; a
	// second exits at once (as safe as a kill: nothing has run yet).
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	startCtx, cancelStart := context.WithCancel(context.Background())
	defer cancelStart()
	started, watched := make(chan struct{}), make(chan struct{})
	var startSig os.Signal
	go func() {
		defer close(watched)
		select {
		case startSig = <-sigs:
			cancelStart()
		case <-started:
			return
		}
		select {
		case sig := <-sigs:
			logger.Warn("second signal while starting; exiting", "signal", sig.String())
			os.Exit(1)
		case <-started:
		}
	}()
	var endStart sync.Once
	startDone := func() os.Signal {
		endStart.Do(func() { close(started); <-watched })
		return startSig
	}
	defer startDone()
	pct, fromEnv := runtime.SetGCDefaults()
	logger.Debug("garbage collector target", "gogc", pct, "from_env", fromEnv)
	if *cpuprofile != "" {
		stop, err := startCPUProfile(*cpuprofile)
		if err != nil {
			return err
		}
		defer stop()
	}
	p, reg, err := openPipeline(paths)
	if err != nil {
		return err
	}
	wopts, err := walOptions(p, logger.With("component", "wal"))
	if err != nil {
		return err
	}
	if p.Log.Fsync == config.FsyncUnsafeNever {
		logger.Warn("log.fsync is unsafe-never: a machine crash loses acknowledged records")
	}
	log, err := openNodeLog(p, wopts, logger)
	if err != nil {
		return err
	}
	defer log.Close()
	// The log runs first: a replicated log serves nothing until its nodes
	// talk, and the runtime reads it while starting.
	logCtx, stopLog := context.WithCancel(context.Background())
	logDone := make(chan error, 1)
	go func() { logDone <- log.Run(logCtx) }()
	logStopped := false
	defer func() {
		if !logStopped {
			stopLog()
			<-logDone
		}
	}()
	host, _ := os.Hostname()
	metrics := rest.NewMetrics()
	resolve := func(cfg map[string]string) (map[string]string, []connect.FieldError) {
		return config.ResolveConfig(cfg, nil)
	}
	rt, err := runtime.New(runtime.Options{
		Log: log, Registry: reg, Chain: chainBuilder, Logger: logger.With("component", "runtime"),
		WorkerID: host, TopicDefaults: wopts.TopicDefaults, ShutdownTimeout: *shutdown,
		Resolve: resolve, Observer: metrics,
	})
	if err != nil {
		return err
	}
	metrics.Attach(rt)
	for _, c := range p.Connectors {
		spec := runtime.ConnectorSpec{Name: c.Name, Class: c.Class, Config: c.Resolved(), Display: c.Config, Origin: runtime.OriginFile, Source: c.Pos.File}
		if err := rt.Add(spec); err != nil {
			return err
		}
	}
	restoreCtx, cancelRestore := context.WithTimeout(startCtx, time.Minute)
	err = rt.Restore(restoreCtx)
	cancelRestore()
	if sig := startDone(); sig != nil {
		logger.Info("signal received while starting; stopping", "signal", sig.String())
		return nil
	}
	if err != nil {
		return fmt.Errorf("restore connectors stored in the log: %w", err)
	}
	if len(rt.Names()) == 0 {
		logger.Warn("no connectors: add some to the pipeline file or create them through the API")
	}

	var ready atomic.Bool
	var api *rest.Server
	if len(p.REST.Listeners) > 0 {
		var lns []rest.Listener
		for _, l := range p.REST.Listeners {
			lns = append(lns, rest.Listener{Addr: l.Addr, TLS: l.TLS})
		}
		api, err = rest.New(rest.Options{
			Runtime: rt, Listeners: lns, TLSCertFile: p.REST.TLSCert, TLSKeyFile: p.REST.TLSKey,
			Token: p.REST.Token.Reveal(), Resolve: resolve, Logger: logger.With("component", "rest"),
			Levels: levels, Metrics: metrics, Version: version, Commit: commit(), ClusterID: clusterID(p.Log.Dir),
			Ready: ready.Load,
		})
		if err != nil {
			return err
		}
		if err := api.Listen(); err != nil {
			return err
		}
		if p.REST.Public() && p.REST.Token == "" {
			logger.Warn("the admin API listens beyond loopback without a token: anyone who reaches it can change connectors; set rest.auth.token", "listeners", api.URLs())
		}
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	// A task stuck in a call that ignores cancellation (a write to a pipe nobody reads) would
	// keep Run from returning even after Abort; the forced stop then ends the process, which
	// is as safe as a kill: the log recovers and uncommitted work is redone.
	// runDone is closed once Run returned (or cmdRun returns before Run): what follows Run is
	// bounded, so only a Run that does not return ends the process.
	runDone := make(chan struct{})
	var runDoneOnce sync.Once
	finished := func() { runDoneOnce.Do(func() { close(runDone) }) }
	defer finished()
	exitIfStuck := func(after time.Duration, why string) *time.Timer {
		return time.AfterFunc(after, func() {
			select {
			case <-runDone:
				return
			default:
			}
			logger.Error("a task did not stop after its in-flight work was abandoned; exiting", "reason", why, "waited", after)
			os.Exit(1)
		})
	}
	go func() {
		var sig os.Signal
		select {
		case sig = <-sigs:
		case <-runDone:
			return
		}
		logger.Info("signal received; stopping gracefully (send it again to force)", "signal", sig.String())
		stop()
		graceful := exitIfStuck(*shutdown+*forceExit, "graceful stop timeout")
		defer graceful.Stop()
		select {
		case sig = <-sigs:
		case <-runDone:
			return
		}
		logger.Warn("second signal; abandoning in-flight work", "signal", sig.String())
		rt.Abort()
		forced := exitIfStuck(*forceExit, "second signal")
		defer forced.Stop()
		<-runDone
	}()

	apiDone := make(chan error, 1)
	if api != nil {
		go func() { apiDone <- api.Run(ctx) }()
	} else {
		apiDone <- nil
	}
	attrs := []any{"version", version, "log_dir", p.Log.Dir, "connectors", len(rt.Names())}
	if api != nil {
		attrs = append(attrs, "api", strings.Join(api.URLs(), ","))
	}
	logger.Info("sluice running", attrs...)
	ready.Store(true)
	runErr := rt.Run(ctx)
	finished()
	stop()
	if err := <-apiDone; err != nil && runErr == nil {
		runErr = err
	}
	stopLog()
	logStopped = true
	if err := <-logDone; err != nil && runErr == nil {
		runErr = err
	}
	if err := log.Close(); err != nil && runErr == nil {
		runErr = fmt.Errorf("close log: %w", err)
	}
	if runErr == nil {
		logger.Info("sluice stopped")
	}
	return runErr
}

// commit is the VCS revision the binary was built from, if known.
func commit() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// clusterID is a stable identifier of the log, reported as kafka_cluster_id.
func clusterID(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return "sluice-" + hex.EncodeToString(sum[:8])
}

func cmdValidate(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	var paths stringList
	fs.Var(&paths, "c", "pipeline file or directory (repeatable)")
	if pos, err := parse(fs, args); err != nil {
		return err
	} else if len(pos) > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", pos[0])}
	}
	p, reg, err := openPipeline(paths)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: OK, log.dir %s, %d connector(s)\n", strings.Join(p.Files, ", "), p.Log.Dir, len(p.Connectors))
	for _, c := range p.Connectors {
		class := c.Class
		if class == "" {
			class = c.Config[runtime.KeyClass]
		}
		pl, _ := reg.Lookup(class, connect.KindSource, connect.KindSink)
		fmt.Fprintf(stdout, "  %s: %s %s\n", c.Name, pl.Name, pl.Kind)
	}
	return nil
}

func cmdTopics(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{"topics: want list, tail, describe or records"}
	}
	if !hasFlag(args, "c", "log-dir") {
		if args[0] == "tail" {
			return usageError{"topics tail reads the log directly: give -c PIPELINE or --log-dir DIR (while sluice runs, use `sluice topics records`)"}
		}
		return cmdTopicsAPI(args, stdout)
	}
	fs := flag.NewFlagSet("topics", flag.ContinueOnError)
	var paths stringList
	fs.Var(&paths, "c", "pipeline file or directory (for log.dir)")
	dir := fs.String("log-dir", "", "the log's directory")
	fromBeginning := fs.Bool("from-beginning", false, "start at the oldest record instead of the end")
	partition := fs.Int("partition", -1, "read only this partition")
	maxMessages := fs.Int("max-messages", 0, "stop after this many records")
	pos, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	if *dir == "" {
		p, _, err := openPipeline(paths)
		if err != nil {
			return err
		}
		*dir = p.Log.Dir
	}
	switch args[0] {
	case "list":
		if len(pos) > 0 {
			return usageError{fmt.Sprintf("unexpected argument %q", pos[0])}
		}
		log, err := openLog(*dir, wal.Options{})
		if err != nil {
			return err
		}
		defer log.Close()
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tRECORDS\tCLEANUP")
		for _, name := range log.Topics() {
			info, err := log.Describe(name)
			if err != nil {
				return err
			}
			var n int64
			for _, p := range info.Partitions {
				n += p.HighWatermark - p.LogStartOffset
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", name, len(info.Partitions), n, info.Config.Map()["cleanup.policy"])
		}
		return tw.Flush()
	case "tail":
		if len(pos) != 1 {
			return usageError{"topics tail: want one TOPIC"}
		}
		log, err := openLog(*dir, wal.Options{})
		if err != nil {
			return err
		}
		defer log.Close()
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		w := bufio.NewWriter(stdout)
		defer w.Flush()
		return runtime.Tail(ctx, log, pos[0], runtime.TailOptions{
			FromBeginning: *fromBeginning, Partition: int32(*partition), Max: *maxMessages, Follow: true,
		}, func(line []byte) error {
			w.Write(line)
			w.WriteByte('\n')
			if w.Buffered() > 0 && *maxMessages == 0 {
				return w.Flush()
			}
			return nil
		})
	}
	return usageError{fmt.Sprintf("topics: unknown subcommand %q", args[0])}
}

// hasFlag reports whether args set one of the named flags.
func hasFlag(args []string, names ...string) bool {
	for _, a := range args {
		for _, n := range names {
			for _, form := range []string{"-" + n, "--" + n} {
				if a == form || strings.HasPrefix(a, form+"=") {
					return true
				}
			}
		}
	}
	return false
}

// startCPUProfile profiles the process into path until the returned func is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("-cpuprofile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
