// Package file is a sink that appends records to a file as JSON lines, like Kafka Connect's
// FileStreamSink, for demos and tests. Each line is one record:
//
//	{"topic":"demo.inventory.customers","partition":0,"offset":17,"version":18,
//	 "key":{"id":4},"value":{"before":null,"after":{...},"source":{...},"op":"c","ts_ms":...}}
//
// with "value":null for a tombstone. topic, partition and offset identify the record in the
// log, so a reader can drop the duplicates that at-least-once delivery brings after a crash.
// Write fsyncs the file before it returns. On open, a last line without its newline (a write
// torn by a crash) is cut off.
package file

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/sluice-cdc/sluice/connect"
)

// KeyFile is the path of the output file; "-" writes to standard output.
const KeyFile = "file"

// Plugin returns the file sink plugin.
func Plugin() connect.Plugin {
	return connect.Plugin{
		Name:    "file",
		Aliases: []string{"org.apache.kafka.connect.file.FileStreamSinkConnector"},
		Kind:    connect.KindSink,
		Version: "1.0.0",
		Doc:     "Appends records to a file as JSON lines (topic, partition, offset, version, key, value).",
		Config: connect.ConfigDef{
			{Name: KeyFile, Type: connect.TypeString, Required: true, Importance: connect.High,
				Doc: `Path of the file to append to (created if missing); "-" (quoted in YAML) writes to standard output.`},
		},
		NewSink: func(cfg connect.Config, env connect.Env) (connect.Sink, error) {
			return New(cfg.String(KeyFile)), nil
		},
	}
}

// Sink is the file sink.
type Sink struct {
	path string
	f    *os.File
	out  io.Writer
	buf  []byte
}

// New returns a sink appending to path ("-": standard output).
func New(path string) *Sink { return &Sink{path: path} }

// Open implements connect.Sink.
func (s *Sink) Open(ctx context.Context) error {
	if s.path == "-" {
		s.out = os.Stdout
		return nil
	}
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return connect.Permanentf("open %s: %w", s.path, err)
	}
	if err := cutTornLine(f); err != nil {
		f.Close()
		return fmt.Errorf("open %s: %w", s.path, err)
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return fmt.Errorf("open %s: %w", s.path, err)
	}
	s.f, s.out = f, f
	return nil
}

// cutTornLine truncates f after its last newline.
func cutTornLine(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	if size == 0 {
		return nil
	}
	buf := make([]byte, 64<<10)
	for end := size; end > 0; {
		start := max(0, end-int64(len(buf)))
		n, err := f.ReadAt(buf[:end-start], start)
		if err != nil && err != io.EOF {
			return err
		}
		for i := n - 1; i >= 0; i-- {
			if buf[i] == '\n' {
				keep := start + int64(i) + 1
				if keep == size {
					return nil
				}
				return f.Truncate(keep)
			}
		}
		end = start
	}
	return f.Truncate(0)
}

// Write implements connect.Sink: one line per record, then fsync.
func (s *Sink) Write(ctx context.Context, batch []connect.Record) error {
	b := s.buf[:0]
	var failed []connect.RecordError
	for i := range batch {
		start := len(b)
		var err error
		if b, err = AppendLine(b, &batch[i]); err != nil {
			b = b[:start]
			failed = append(failed, connect.RecordError{Index: i, Err: err})
		}
	}
	s.buf = b
	if _, err := s.out.Write(b); err != nil {
		return fmt.Errorf("write %s: %w", s.path, err)
	}
	if s.f != nil {
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", s.path, err)
		}
	}
	if len(s.buf) > 1<<20 {
		s.buf = nil
	}
	if failed != nil {
		return &connect.WriteError{Failed: failed}
	}
	return nil
}

// AppendLine appends r's JSON line (with its newline) to dst.
func AppendLine(dst []byte, r *connect.Record) ([]byte, error) {
	dst = append(dst, `{"topic":`...)
	dst, _ = connect.AppendJSON(dst, r.Topic)
	dst = append(dst, `,"partition":`...)
	dst = strconv.AppendInt(dst, int64(r.Partition), 10)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, r.Offset, 10)
	dst = append(dst, `,"version":`...)
	dst = strconv.AppendInt(dst, r.Version, 10)
	dst = append(dst, `,"key":`...)
	var err error
	if dst, err = connect.AppendJSON(dst, r.Key); err != nil {
		return dst, fmt.Errorf("render key: %w", err)
	}
	dst = append(dst, `,"value":`...)
	if dst, err = connect.AppendJSON(dst, r.Value); err != nil {
		return dst, fmt.Errorf("render value: %w", err)
	}
	return append(dst, "}\n"...), nil
}

// Close implements connect.Sink.
func (s *Sink) Close(ctx context.Context) error {
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}
