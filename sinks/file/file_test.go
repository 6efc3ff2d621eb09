package file

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-cdc/sluice/connect"
)

func TestWriteLinesAndCutTornLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.jsonl")
	ctx := context.Background()
	s := New(path)
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	recs := []connect.Record{
		{Topic: "db.inv.customers", Partition: 2, Offset: 7, Version: 8, Key: connect.Row{{Name: "id", Value: int64(4)}},
			Value: connect.Row{{Name: "op", Value: "c"}, {Name: "name", Value: "Anne \"K\""}}},
		{Topic: "db.inv.customers", Partition: 2, Offset: 8, Version: 9, Key: connect.Row{{Name: "id", Value: int64(4)}}},
	}
	if err := s.Write(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	want := `{"topic":"db.inv.customers","partition":2,"offset":7,"version":8,"key":{"id":4},"value":{"op":"c","name":"Anne \"K\""}}
{"topic":"db.inv.customers","partition":2,"offset":8,"version":9,"key":{"id":4},"value":null}
`
	got, _ := os.ReadFile(path)
	if string(got) != want {
		t.Fatalf("file:\n%s\nwant:\n%s", got, want)
	}
	// A crash mid-write leaves a torn line; the next open cuts it off and appends after.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"topic":"db.inv.cus`)
	f.Close()
	s = New(path)
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, recs[1:]); err != nil {
		t.Fatal(err)
	}
	s.Close(ctx)
	got, _ = os.ReadFile(path)
	if string(got) != want+`{"topic":"db.inv.customers","partition":2,"offset":8,"version":9,"key":{"id":4},"value":null}`+"\n" {
		t.Fatalf("after the torn line:\n%s", got)
	}
}

func TestRejectsWhatItCannotRender(t *testing.T) {
	s := New(filepath.Join(t.TempDir(), "out.jsonl"))
	ctx := context.Background()
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	err := s.Write(ctx, []connect.Record{{Topic: "t", Value: connect.Row{{Name: "x", Value: struct{}{}}}}, {Topic: "t"}})
	var we *connect.WriteError
	if !errors.As(err, &we) || len(we.Failed) != 1 || we.Failed[0].Index != 0 {
		t.Fatalf("Write: %v, want a WriteError for record 0", err)
	}
}

func TestOpenFailsPermanentlyOnABadPath(t *testing.T) {
	err := New(filepath.Join(t.TempDir(), "no", "such", "dir", "out.jsonl")).Open(context.Background())
	if !connect.IsPermanent(err) {
		t.Fatalf("Open: %v, want a permanent error", err)
	}
}
