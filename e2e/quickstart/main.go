// Command quickstart runs sluice's example pipeline on this machine: it starts MariaDB,
// PostgreSQL, Redis and Elasticsearch through the e2e harness, creates sample "inventory"
// tables, writes a pipeline (MariaDB and PostgreSQL into Elasticsearch and Redis, with unwrap)
// and runs `sluice run` in the foreground, printing where to look. Ctrl-C stops everything.
//
//	make quickstart                         # installs what is missing, builds, runs this
//	go run ./e2e/quickstart -bin bin/sluice [-api 127.0.0.1:8083] [-dir DIR]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	var opts options
	flag.StringVar(&opts.Bin, "bin", "", "the sluice binary (default: build one)")
	flag.StringVar(&opts.API, "api", "127.0.0.1:8083", "the admin API's address")
	flag.StringVar(&opts.Dir, "dir", "", "work dir for the log and the pipeline file (default: a temp dir, removed at the end)")
	flag.Parse()
	opts.Progress = os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	q, err := start(ctx, opts)
	if err != nil {
		if q != nil {
			q.close()
		}
		fmt.Fprintf(os.Stderr, "quickstart: %v\n", err)
		os.Exit(1)
	}
	q.banner(os.Stdout)
	select {
	case <-ctx.Done():
		fmt.Println("\nstopping sluice and the servers ...")
	case <-q.done:
		fmt.Fprintf(os.Stderr, "quickstart: sluice exited: %v\n", q.err)
	}
	if err := q.stop(45 * time.Second); err != nil {
		fmt.Fprintf(os.Stderr, "quickstart: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("stopped.")
}
