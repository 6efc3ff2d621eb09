package runtime

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-cdc/sluice/connect"
)

// TestDecodeRecord: what the sink side makes of stored records, headers and the version
// header included.
func TestDecodeRecord(t *testing.T) {
	ts := time.UnixMilli(1700000000000)
	key := connect.Row{{Name: "id", Value: int64(7)}}
	val := connect.Row{{Name: "id", Value: int64(7)}, {Name: "name", Value: "x"}}
	for _, tc := range []struct {
		name    string
		rec     connect.Record
		headers []LogHeader // stored as they are, instead of rec's encoding
		want    connect.Record
		err     string
	}{
		{name: "version only", rec: connect.Record{Key: key, Value: val, Version: 42},
			want: connect.Record{Key: key, Value: val, Version: 42}},
		{name: "version and other headers", rec: connect.Record{Key: key, Value: val, Version: 9223372036854775807,
			Headers: connect.Headers{{Key: connect.HeaderUnchanged, Value: []byte("bio")}, {Key: "h", Value: nil}}},
			want: connect.Record{Key: key, Value: val, Version: 9223372036854775807,
				Headers: connect.Headers{{Key: connect.HeaderUnchanged, Value: []byte("bio")}, {Key: "h", Value: nil}}}},
		{name: "no version", rec: connect.Record{Key: key, Value: val}, want: connect.Record{Key: key, Value: val}},
		{name: "tombstone without key", rec: connect.Record{}, want: connect.Record{}},
		{name: "version with leading zeros", headers: []LogHeader{{Key: connect.HeaderVersion, Value: []byte("007")}},
			want: connect.Record{Version: 7}},
		{name: "negative version", headers: []LogHeader{{Key: connect.HeaderVersion, Value: []byte("-3")}},
			want: connect.Record{Version: -3}},
		{name: "version beyond int64", headers: []LogHeader{{Key: connect.HeaderVersion, Value: []byte("9999999999999999999")}},
			err: `decode header __sluice.version: "9999999999999999999" is not an integer`},
		{name: "version not a number", headers: []LogHeader{{Key: connect.HeaderVersion, Value: []byte("12a")}},
			err: `decode header __sluice.version: "12a" is not an integer`},
		{name: "empty version", headers: []LogHeader{{Key: connect.HeaderVersion, Value: []byte{}}},
			err: `decode header __sluice.version: "" is not an integer`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a arena
			k, _ := a.encodeKey(tc.rec.Key, nil)
			v, _ := a.encodeValue(tc.rec.Value, nil)
			_, hs := a.encodeHeaders(nil, &tc.rec)
			if tc.headers != nil {
				hs = tc.headers
			}
			lr := LogRecord{Offset: 5, Timestamp: ts, Key: k, Value: v, Headers: hs}
			got, err := DecodeRecord("t", 2, &lr)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			want.Topic, want.Partition, want.Offset, want.Timestamp = "t", 2, 5, ts
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("(-want +got):\n%s", d)
			}
			if len(got.Headers) > 0 && len(lr.Headers) > 0 && &got.Headers[0].Value == &lr.Headers[0].Value {
				t.Fatal("headers alias the stored record")
			}
		})
	}
}

// FuzzParseVersion: the version header parses exactly as strconv.ParseInt would.
func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"0", "42", "007", "-1", "9223372036854775807", "9223372036854775808", "9999999999999999999", "", "1e3", "+5"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, werr := strconv.ParseInt(string(b), 10, 64)
		got, gerr := parseVersion(b)
		if (werr == nil) != (gerr == nil) || werr == nil && got != want {
			t.Fatalf("parseVersion(%q) = %d, %v; ParseInt: %d, %v", b, got, gerr, want, werr)
		}
	})
}

// TestDecodedRecycled: a chunk's array goes back to the pool cleared, and records a sink keeps
// from earlier batches are not changed by later chunks decoding into the same array.
func TestDecodedRecycled(t *testing.T) {
	c := &sinkTask{c: &connector{}}
	var a arena
	var kept []connect.Record
	for round := range 50 {
		var recs []LogRecord
		for i := range chunkRecords {
			v, _ := a.encodeValue(connect.Row{{Name: "n", Value: int64(round*1000 + i)}}, nil)
			recs = append(recs, LogRecord{Offset: int64(i), Value: v})
		}
		ch := &chunk{tp: TopicPartition{Topic: "t"}, recs: recs}
		c.prepare(ch)
		kept = append(kept, ch.out[0].rec, ch.out[chunkRecords-1].rec)
		buf := ch.buf
		ch.release()
		if len(*buf) != 0 || cap(*buf) < chunkRecords {
			t.Fatalf("released array: len %d cap %d", len(*buf), cap(*buf))
		}
		for _, d := range (*buf)[:cap(*buf)] {
			if d.rec.Value != nil || d.keep {
				t.Fatal("a released array still refers to records")
			}
		}
	}
	for i, r := range kept {
		round, last := i/2, i%2 == 1
		want := int64(round * 1000)
		if last {
			want += chunkRecords - 1
		}
		if got, _ := r.Value.(connect.Row).Get("n"); got != want {
			t.Fatalf("kept record %d holds %v, want %d", i, got, want)
		}
	}
}

// Records that share a Version share its header bytes while the arena lives; after a reset,
// whose memory the next batch overwrites, the header is written again.
func TestVersionHeaderReuse(t *testing.T) {
	a := arena{buf: make([]byte, 0, 4096)} // room for all: a reset makes the next bytes overwrite these
	header := func(hs []LogHeader) string {
		for _, h := range hs {
			if h.Key == connect.HeaderVersion {
				return string(h.Value)
			}
		}
		return "<none>"
	}
	var got []string
	var first []byte // the first record's header bytes
	for i, v := range []int64{5, 5, 7, 5, 0, 5} {
		_, hs := a.encodeHeaders(nil, &connect.Record{Version: v})
		got = append(got, header(hs))
		switch {
		case i == 0:
			first = hs[0].Value
		case i == 1 && &hs[0].Value[0] != &first[0]:
			t.Fatal("two records of one Version in a row got header bytes of their own")
		}
	}
	if want := []string{"5", "5", "7", "5", "<none>", "5"}; !slices.Equal(got, want) {
		t.Fatalf("version headers %q, want %q", got, want)
	}
	a.encodeHeaders(nil, &connect.Record{Version: 123456})
	a.reset()
	if _, err := a.encodeValue("overwrite the arena's first bytes", nil); err != nil {
		t.Fatal(err)
	}
	_, again := a.encodeHeaders(nil, &connect.Record{Version: 123456})
	if header(again) != "123456" {
		t.Fatalf("after a reset the version header reads %q, want 123456", header(again))
	}
}
