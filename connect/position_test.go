package connect

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPositionBinaryGolden(t *testing.T) {
	// Encoded positions are stored in the log and must decode forever: each golden file holds
	// an encoding written by an earlier build.
	cases := map[string]Position{
		"v1_mysql.bin":      {Order: []byte{0, 0, 0, 1, 1, 0, 0, 0, 3, 0, 0, 1, 228, 0, 0, 0, 0}, State: []byte(`{"v":1,"file":"mariadb-bin.000003","pos":484,"row":0,"gtid":"0-1-42"}`)},
		"v1_postgres.bin":   {Order: []byte{0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 111, 147, 216, 0, 0, 0, 2}, State: []byte(`{"v":1,"lsn":"0/16F93D8","idx":2}`)},
		"v1_order_only.bin": {Order: []byte{7}},
	}
	for name, want := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("testdata", "position", name)
			if *update {
				b, _ := want.MarshalBinary()
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var got Position
			if err := got.UnmarshalBinary(b); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
			again, _ := got.MarshalBinary()
			if !bytes.Equal(again, b) {
				t.Fatalf("re-encoding differs: %x vs %x", again, b)
			}
		})
	}
}

func TestPositionErrors(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want string
	}{
		{[]byte{2, 0}, "malformed position: unknown version 2"},
		{[]byte{1}, "malformed position: bad order length"},
		{[]byte{1, 5, 1, 2}, "malformed position: order length 5 exceeds the 2 bytes left"},
		{[]byte{1, 0x80}, "malformed position: bad order length"},
	} {
		var p Position
		err := p.UnmarshalBinary(tc.in)
		if err == nil || err.Error() != tc.want || !errors.Is(err, ErrPositionFormat) {
			t.Errorf("%x: got %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestPositionCompareAndJSON(t *testing.T) {
	a := Position{Order: []byte{0, 1}, State: []byte(`{"v":1}`)}
	b := Position{Order: []byte{0, 1, 0}}
	c := Position{Order: []byte{1}}
	if a.Compare(b) >= 0 || b.Compare(c) >= 0 || c.Compare(a) <= 0 || a.Compare(a.Clone()) != 0 {
		t.Fatal("positions do not order by Order")
	}
	if !(Position{}).IsZero() || a.IsZero() {
		t.Fatal("IsZero")
	}
	j, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if string(j) != `{"order":"0001","state":{"v":1}}` {
		t.Fatalf("json %s", j)
	}
	var back Position
	if err := json.Unmarshal(j, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, back); diff != "" {
		t.Fatal(diff)
	}
	for in, want := range map[string]string{
		`{"state":{}}`:             `malformed position: missing "order"`,
		`{"order":"zz"}`:           `malformed position: order is not hex: encoding/hex: invalid byte: U+007A 'z'`,
		`{"order":"00","extra":1}`: `malformed position: json: unknown field "extra"`,
	} {
		var p Position
		if err := json.Unmarshal([]byte(in), &p); err == nil || err.Error() != want {
			t.Errorf("%s: got %v, want %q", in, err, want)
		}
	}
	var z Position
	if err := json.Unmarshal([]byte(`null`), &z); err != nil || !z.IsZero() {
		t.Fatalf("null: %v %v", z, err)
	}
}

func FuzzPositionBinary(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 2, 9, 9, '{', '}'})
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		var p Position
		if err := p.UnmarshalBinary(in); err != nil {
			return
		}
		out, err := p.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var q Position
		if err := q.UnmarshalBinary(out); err != nil {
			t.Fatalf("re-decode %x: %v", out, err)
		}
		if p.Compare(q) != 0 || !bytes.Equal(p.State, q.State) {
			t.Fatalf("round trip changed %v to %v", p, q)
		}
	})
}
