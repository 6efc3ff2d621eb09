package redis

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"
	"strconv"
	"time"
)

// A row's version marker, as stored in Redis (see the README's data layout): the version in 19
// decimal digits followed by the fingerprint of the row's columns (8 hex digits) for a hash
// written whole, "-" for a deleted row, nothing otherwise; a stream row's marker is the version
// and the log offset, 19 digits each. Fixed widths keep the format that earlier releases
// compared as strings in a server-side script.

// fpState is what a marker says about the columns of the stored hash.
type fpState uint8

const (
	fpNone    fpState = iota // no fingerprint: a json row, or a hash only partly written
	fpDeleted                // "-": the row was deleted (no field of an old row is left)
	fpHash                   // the fingerprint of the columns of the last whole row
	fpOther                  // something this release does not write: never equal
)

// marker is a decoded version marker.
type marker struct {
	ver int64
	off int64 // stream markers: the log offset of the last appended change
	// exp is when Redis drops the marker at the latest (unix nanoseconds); 0: never.
	exp     int64
	fp      uint32
	fpState fpState
	ok      bool // a marker is stored; false: none (a new row, or an expired marker)
	// touched marks, in a chunk's plan, a marker the chunk changes (never cached)
	touched bool
	// legacy (redis.version.storage=field) marks a live row whose version is in a marker key
	// (written with storage key): the row's next write deletes that key
	legacy bool
}

// encode renders the marker as stored; stream reports a stream marker.
func (m marker) encode(stream bool) string {
	b := make([]byte, 0, 38)
	b = appendPad19(b, m.ver)
	if stream {
		return string(appendPad19(b, m.off))
	}
	switch m.fpState {
	case fpDeleted:
		b = append(b, '-')
	case fpHash:
		b = appendHex8(b, m.fp)
	}
	return string(b)
}

// decodeMarker parses a stored marker.
func decodeMarker(s string, stream bool) (marker, error) {
	m := marker{ok: true}
	if len(s) < 19 {
		return m, fmt.Errorf("%q is not a version marker", s)
	}
	var err error
	if m.ver, err = parsePad19(s[:19]); err != nil {
		return m, fmt.Errorf("%q is not a version marker", s)
	}
	rest := s[19:]
	if stream {
		if rest == "" { // an unguarded change of an earlier release: the version alone
			return m, nil
		}
		if len(rest) != 19 {
			return m, fmt.Errorf("%q is not a stream version marker", s)
		}
		if m.off, err = parsePad19(rest); err != nil {
			return m, fmt.Errorf("%q is not a stream version marker", s)
		}
		return m, nil
	}
	switch {
	case rest == "":
		m.fpState = fpNone
	case rest == "-":
		m.fpState = fpDeleted
	case len(rest) == 8:
		fp, err := strconv.ParseUint(rest, 16, 32)
		if err != nil {
			m.fpState = fpOther
			break
		}
		m.fpState, m.fp = fpHash, uint32(fp)
	default:
		m.fpState = fpOther
	}
	return m, nil
}

func parsePad19(s string) (int64, error) {
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, strconv.ErrSyntax
		}
		n = n*10 + int64(c-'0')
	}
	return n, nil
}

// appendPad19 appends a non-negative int64 in 19 digits, so that versions compare as strings.
func appendPad19(b []byte, n int64) []byte {
	if n < 0 {
		n = 0
	}
	var d [19]byte
	for i := 18; i >= 0; i-- {
		d[i] = byte('0' + n%10)
		n /= 10
	}
	return append(b, d[:]...)
}

func appendHex8(b []byte, v uint32) []byte {
	const digits = "0123456789abcdef"
	var d [8]byte
	for i := 7; i >= 0; i-- {
		d[i] = digits[v&15]
		v >>= 4
	}
	return append(b, d[:]...)
}

// expired reports whether Redis may have dropped the marker by now.
func (m marker) expired(now int64) bool { return m.exp != 0 && m.exp <= now }

// rowID names a version marker key in the cache: two independent 64-bit hashes of it (with
// seeds chosen per process), so that the cache holds no key strings and compares no bytes.
// Two of a million keys share both hashes with a probability of about 10^-27.
type rowID struct{ a, b uint64 }

var idSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

func idOf(vkey string) rowID {
	return rowID{maphash.String(idSeeds[0], vkey), maphash.String(idSeeds[1], vkey)}
}

// versionCache remembers the markers this sink wrote or read, so that most writes are decided
// without reading Redis. It is sound because one sink instance writes a generation's markers
// (the owner key fences any other, see apply.go); a marker it does not hold is read from
// Redis. It holds at most max entries, in a table of buckets of four entries indexed by the
// row id (already a hash: nothing is hashed again and no key bytes are kept). A bucket starts
// with its entries' second hashes, so that a lookup reads that cache line and, on a hit, the
// entry's: the table is far larger than the processor's caches, and these misses are most of
// the guard's cost in the sink. A full bucket gives up the entry put longest ago, so that
// recently written rows stay. The table starts small and doubles up to max entries (when half
// full, or when a bucket is full).
type versionCache struct {
	max     int // the most entries (a multiple of 4)
	buckets []cacheBucket
	n       int    // entries held
	clock   uint32 // put counter: an entry's age is clock - its stamp
}

const cacheWays = 4

// cacheBucket holds up to four markers; entry i is free when tag[i] is 0.
type cacheBucket struct {
	tag   [cacheWays]uint64 // the ids' b | 1
	stamp [cacheWays]uint32 // the clock when each was put
	e     [cacheWays]cacheEntry
}

type cacheEntry struct {
	a        uint64 // the id's a
	ver, off int64
	exp      int64
	fp       uint32
	st       fpState
	legacy   bool
}

func newVersionCache(max int) *versionCache {
	c := &versionCache{max: max / cacheWays * cacheWays}
	c.clear()
	return c
}

func tagOf(id rowID) uint64 { return id.b | 1 }

// bucket returns id's bucket.
func (c *versionCache) bucket(id rowID) *cacheBucket {
	hi, _ := bits.Mul64(id.a, uint64(len(c.buckets)))
	return &c.buckets[hi]
}

// find returns the index of id in b, or -1.
func (b *cacheBucket) find(id rowID) int {
	t := tagOf(id)
	for i := range b.tag {
		if b.tag[i] == t && b.e[i].a == id.a {
			return i
		}
	}
	return -1
}

// get returns the cached marker of id unless it may have expired. Reading does not renew an
// entry: the sink puts every marker it writes again, and those it only reads (their writes
// refused) may age out.
func (c *versionCache) get(id rowID, now int64) (marker, bool) {
	if len(c.buckets) == 0 {
		return marker{}, false
	}
	b := c.bucket(id)
	i := b.find(id)
	if i < 0 {
		return marker{}, false
	}
	e := &b.e[i]
	m := marker{ok: true, ver: e.ver, off: e.off, exp: e.exp, fp: e.fp, fpState: e.st, legacy: e.legacy}
	if m.expired(now) {
		return marker{}, false
	}
	return m, true
}

func (c *versionCache) put(id rowID, m marker) {
	if c.max <= 0 {
		return
	}
	if c.n >= len(c.buckets)*cacheWays/2 && len(c.buckets)*cacheWays < c.max {
		c.grow()
	}
	b := c.bucket(id)
	i := b.find(id)
	if i < 0 {
		old := 0
		for j := range b.tag {
			if b.tag[j] == 0 {
				i = j
				break
			}
			if c.clock-b.stamp[j] > c.clock-b.stamp[old] {
				old = j
			}
		}
		if i < 0 && len(c.buckets)*cacheWays < c.max {
			c.grow() // rather than give up an entry while the table may grow
			c.put(id, m)
			return
		}
		if i < 0 { // the bucket is full: the entry put longest ago goes
			i = old
		} else {
			c.n++
		}
	}
	c.clock++
	b.tag[i], b.stamp[i] = tagOf(id), c.clock
	b.e[i] = cacheEntry{a: id.a, ver: m.ver, off: m.off, exp: m.exp, fp: m.fp, st: m.fpState, legacy: m.legacy}
}

// grow doubles the table (up to max entries), keeping every entry it can place, the newer
// ones first.
func (c *versionCache) grow() {
	old := c.buckets
	type held struct {
		id    rowID
		stamp uint32
		e     cacheEntry
	}
	var all []held
	for bi := range old {
		b := &old[bi]
		for i := range b.tag {
			if b.tag[i] != 0 {
				all = append(all, held{rowID{b.e[i].a, b.tag[i]}, b.stamp[i], b.e[i]})
			}
		}
	}
	clock := c.clock
	slices.SortFunc(all, func(x, y held) int { return cmp.Compare(clock-x.stamp, clock-y.stamp) })
	c.buckets, c.n = make([]cacheBucket, min(len(old)*2, c.max/cacheWays)), 0
	for _, h := range all {
		b := c.bucket(h.id)
		for i := range b.tag {
			if b.tag[i] == 0 {
				b.tag[i], b.stamp[i], b.e[i] = h.id.b, h.stamp, h.e
				c.n++
				break
			}
		}
	}
}

func (c *versionCache) drop(id rowID) {
	if len(c.buckets) == 0 {
		return
	}
	b := c.bucket(id)
	if i := b.find(id); i >= 0 {
		b.tag[i], b.e[i] = 0, cacheEntry{}
		c.n--
	}
}

func (c *versionCache) len() int { return c.n }

func (c *versionCache) clear() {
	c.buckets, c.n = make([]cacheBucket, min(c.max, 4096)/cacheWays), 0
}

func nowNanos() int64 { return time.Now().UnixNano() }
