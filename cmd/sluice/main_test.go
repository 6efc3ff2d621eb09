package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/wal"
)

func runCmd(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestVersionAndUsage(t *testing.T) {
	if code, out, _ := runCmd("version"); code != 0 || out != "sluice "+version+"\n" {
		t.Fatalf("version: %d %q", code, out)
	}
	if code, _, errs := runCmd("frobnicate"); code != 2 || !strings.HasPrefix(errs, "sluice: unknown command \"frobnicate\"\nusage:") {
		t.Fatalf("unknown command: %d %q", code, errs)
	}
	if code, _, errs := runCmd("validate"); code != 2 || !strings.HasPrefix(errs, "sluice: -c PIPELINE is required\n") {
		t.Fatalf("validate without -c: %d %q", code, errs)
	}
	if code, _, errs := runCmd("run", "-c", "x.yaml", "--log-format", "xml"); code != 2 || !strings.HasPrefix(errs, `sluice: --log-format "xml": want text or json`) {
		t.Fatalf("bad log format: %d %q", code, errs)
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("log:\n  dir: "+dir+"\nconnectors:\n  - name: gen\n    class: datagen\n    config:\n      datagen.keys: 0\n      datagen.rat: 5\n"), 0o644)
	code, _, errs := runCmd("validate", "-c", bad)
	want := bad + ":7:7: connectors[gen].config.datagen.keys: must be 1..1099511627776 (got 0)\n" +
		bad + ":8:7: connectors[gen].config.datagen.rat: unknown key; did you mean \"datagen.rate\"?\n" +
		"sluice: 2 problem(s) in the pipeline\n"
	if code != 1 || errs != want {
		t.Fatalf("validate: exit %d\n%s\nwant exit 1\n%s", code, errs, want)
	}
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("log:\n  dir: "+dir+"\nconnectors:\n  - name: gen\n    class: datagen\n  - name: out\n    class: FileStreamSinkConnector\n    config:\n      topics: a\n      file: \"-\"\n      transforms: u\n      transforms.u.type: io.debezium.transforms.ExtractNewRecordState\n"), 0o644)
	code, out, errs := runCmd("validate", "-c", good)
	if code != 0 || out != good+": OK, log.dir "+dir+", 2 connector(s)\n  gen: datagen source\n  out: file sink\n" {
		t.Fatalf("validate: exit %d\n%s%s", code, out, errs)
	}
	// A transform misconfiguration is found by the transforms package's chain builder.
	os.WriteFile(good, []byte("log:\n  dir: "+dir+"\nconnectors:\n  - name: out\n    class: file\n    config:\n      topics: a\n      file: \"-\"\n      transforms: u\n      transforms.u.type: NoSuchTransform\n"), 0o644)
	if code, _, errs := runCmd("validate", "-c", good); code != 1 || !strings.Contains(errs, "connectors[out].config.transforms.u.type: ") {
		t.Fatalf("validate with a bad transform: exit %d\n%s", code, errs)
	}
}

func TestSnapshotsStatusRendering(t *testing.T) {
	eta := 9.0
	st := snapshotStatusJSON{Name: "pg", State: "RUNNING", ChunkID: 41, RemainingTables: 1}
	st.Tables = append(st.Tables, struct {
		Table         string   `json:"table"`
		Type          string   `json:"type"`
		State         string   `json:"state"`
		Filter        string   `json:"filter"`
		RowsScanned   int64    `json:"rows_scanned"`
		TotalEstimate int64    `json:"total_estimate"`
		Percent       float64  `json:"percent"`
		RowsPerSecond float64  `json:"rows_per_second"`
		ETASeconds    *float64 `json:"eta_seconds"`
	}{Table: "public.orders", Type: "incremental", State: "RUNNING", RowsScanned: 90400, TotalEstimate: 200000, Percent: 45.2, RowsPerSecond: 12345.4, ETASeconds: &eta})
	var b bytes.Buffer
	if err := renderSnapshots(&b, st, true); err != nil {
		t.Fatal(err)
	}
	want := "pg: RUNNING, 41 chunk(s) read, 1 table(s) left\n" +
		"TABLE          TYPE         STATE    PROGRESS                       ROWS             RATE      ETA\n" +
		"public.orders  incremental  RUNNING  [#########...........]  45.2%  90,400/~200,000  12,345/s  9s\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
	if code, _, errs := runCmd("snapshots", "start", "pg"); code != 2 || !strings.HasPrefix(errs, "sluice: snapshots start: want CONNECTOR TABLE...") {
		t.Fatalf("start without tables: %d %q", code, errs)
	}
	if code, _, errs := runCmd("snapshots", "start", "pg", "public.t", "--filter", "nocondition"); code != 2 || !strings.Contains(errs, `--filter "nocondition": want TABLE=CONDITION`) {
		t.Fatalf("bad filter: %d %q", code, errs)
	}
}

func TestCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	stop, err := startCPUProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("%s is not a gzipped pprof profile: % x", path, b[:min(len(b), 8)])
	}
	if _, err := startCPUProfile(filepath.Join(t.TempDir(), "missing", "cpu.pprof")); err == nil || !strings.HasPrefix(err.Error(), "-cpuprofile: open ") {
		t.Fatalf("profile into a missing directory: %v", err)
	}
}

// TestTopicsCompressedByDefault: the topics `sluice run` creates compress their batches with
// snappy unless log.topic says otherwise.
func TestTopicsCompressedByDefault(t *testing.T) {
	opts, err := walOptions(&config.Pipeline{Log: config.LogSettings{Partitions: 1}}, slog.New(slog.DiscardHandler))
	if err != nil || opts.TopicDefaults.Compression != wal.Snappy {
		t.Fatalf("default compression.type: %v %v, want snappy", opts.TopicDefaults.Compression, err)
	}
	p := &config.Pipeline{Log: config.LogSettings{Partitions: 1, Topic: map[string]string{"compression.type": "zstd"}}}
	if opts, err = walOptions(p, slog.New(slog.DiscardHandler)); err != nil || opts.TopicDefaults.Compression != wal.Zstd {
		t.Fatalf("compression.type zstd: %v %v", opts.TopicDefaults.Compression, err)
	}
}
