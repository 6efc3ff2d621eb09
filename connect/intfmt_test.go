package connect

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// appendInt and appendUint write what strconv writes, for every power of ten and its
// neighbours, the extremes, and random values of every length, after a prefix and into a
// buffer with and without room.
func TestAppendIntLikeStrconv(t *testing.T) {
	var ints []int64
	var uints []uint64
	for p := uint64(1); ; p *= 10 {
		for _, d := range []uint64{0, 1, 2, 9} {
			uints = append(uints, p-d, p+d)
		}
		if p > math.MaxUint64/10 {
			break
		}
	}
	uints = append(uints, 0, 1, 99, 100, 101, math.MaxUint64, math.MaxUint64-1, math.MaxInt64, math.MaxInt64+1)
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		uints = append(uints, r.Uint64()>>r.IntN(64))
	}
	for _, u := range uints {
		ints = append(ints, int64(u), -int64(u))
	}
	ints = append(ints, math.MinInt64, math.MinInt64+1, math.MaxInt64, -1, 0)
	for _, room := range []int{0, 32} {
		for _, x := range ints {
			dst := make([]byte, 3, 3+room)
			copy(dst, "ab:")
			if got, want := string(appendInt(dst, x)), "ab:"+strconv.FormatInt(x, 10); got != want {
				t.Fatalf("appendInt(%d) = %q, want %q", x, got, want)
			}
		}
		for _, u := range uints {
			dst := make([]byte, 3, 3+room)
			copy(dst, "ab:")
			if got, want := string(appendUint(dst, u)), "ab:"+strconv.FormatUint(u, 10); got != want {
				t.Fatalf("appendUint(%d) = %q, want %q", u, got, want)
			}
		}
	}
}

func BenchmarkAppendInt(b *testing.B) {
	vals := []int64{7, 42, 1234567, 1796057681576, -98765, 223344, 27893760}
	buf := make([]byte, 0, 64)
	b.Run("sluice", func(b *testing.B) {
		for i := range b.N {
			buf = appendInt(buf[:0], vals[i%len(vals)])
		}
	})
	b.Run("strconv", func(b *testing.B) {
		for i := range b.N {
			buf = strconv.AppendInt(buf[:0], vals[i%len(vals)], 10)
		}
	})
}
