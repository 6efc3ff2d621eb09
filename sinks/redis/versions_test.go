package redis

import (
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestMarkerFormat pins the stored form of version markers: views written by earlier releases
// (whose server-side script compared these strings) must read the same.
func TestMarkerFormat(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stored string
		stream bool
		want   marker
		err    string
	}{
		{name: "hash", stored: "0000000000000000042" + "0a1b2c3d", want: marker{ok: true, ver: 42, fpState: fpHash, fp: 0x0a1b2c3d}},
		{name: "deleted", stored: "0000000000000000043-", want: marker{ok: true, ver: 43, fpState: fpDeleted}},
		{name: "json or partial hash", stored: "9223372036854775807", want: marker{ok: true, ver: 1<<63 - 1}},
		{name: "stream", stored: "0000000000000000007" + "0000000000000001234", stream: true, want: marker{ok: true, ver: 7, off: 1234}},
		{name: "stream of an unguarded change", stored: "0000000000000000007", stream: true, want: marker{ok: true, ver: 7}},
		{name: "unknown fingerprint", stored: "0000000000000000042xyz", want: marker{ok: true, ver: 42, fpState: fpOther}},
		{name: "not hex", stored: "0000000000000000042zzzzzzzz", want: marker{ok: true, ver: 42, fpState: fpOther}},
		{name: "short", stored: "42", err: `"42" is not a version marker`},
		{name: "not digits", stored: "000000000000000004x", err: `"000000000000000004x" is not a version marker`},
		{name: "bad stream offset", stored: "0000000000000000007x", stream: true, err: `"0000000000000000007x" is not a stream version marker`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeMarker(tc.stored, tc.stream)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("decode %q: %v, want %q", tc.stored, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(marker{})); d != "" {
				t.Fatalf("decode %q (-want +got):\n%s", tc.stored, d)
			}
			if tc.want.fpState != fpOther && tc.name != "stream of an unguarded change" {
				if enc := got.encode(tc.stream); enc != tc.stored {
					t.Fatalf("encode = %q, want %q", enc, tc.stored)
				}
			}
		})
	}
}

// TestVersionCacheBound: the cache never holds more than its size, keeps what was written
// recently, and forgets markers that may have expired.
func TestVersionCacheBound(t *testing.T) {
	c := newVersionCache(100)
	for i := range 1000 {
		c.put(idOf(strconv.Itoa(i)), marker{ok: true, ver: int64(i)})
		if c.len() > 100 {
			t.Fatalf("%d entries after %d puts, want at most 100", c.len(), i+1)
		}
		if _, ok := c.get(idOf("0"), 0); !ok {
			t.Fatalf("entry 0, put again after every put, was evicted after %d puts", i+1)
		}
		c.put(idOf("0"), marker{ok: true})
	}
	if m, ok := c.get(idOf("999"), 0); !ok || m.ver != 999 {
		t.Fatalf("latest entry: %+v, %v", m, ok)
	}
	held := 0
	for i := 1; i <= 500; i++ {
		if _, ok := c.get(idOf(strconv.Itoa(i)), 0); ok {
			held++
		}
	}
	// 100 slots in buckets of 4 (a bucket gives up its oldest entry): an entry survives 500
	// newer puts only if fewer than 4 of them fell into its bucket of 25
	if held > 5 {
		t.Fatalf("%d of the 500 entries unused for 500 puts or more are still held", held)
	}
	c.put(idOf("x"), marker{ok: true, exp: 10})
	if _, ok := c.get(idOf("x"), 9); !ok {
		t.Fatal("entry before its expiry not found")
	}
	if _, ok := c.get(idOf("x"), 10); ok {
		t.Fatal("entry found at its expiry")
	}
	c.drop(idOf("999"))
	if _, ok := c.get(idOf("999"), 0); ok {
		t.Fatal("dropped entry found")
	}
	c.clear()
	if c.len() != 0 {
		t.Fatalf("%d entries after clear", c.len())
	}
	z := newVersionCache(0)
	z.put(idOf("a"), marker{ok: true})
	z.put(idOf("b"), marker{ok: true})
	if z.len() != 0 {
		t.Fatalf("size 0 holds %d", z.len())
	}
}
