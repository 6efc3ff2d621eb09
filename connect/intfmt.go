package connect

import "math/bits"

// appendInt appends the decimal form of x, as strconv.AppendInt(dst, x, 10) does, writing the
// digits in place instead of through a buffer and a copy (integers are most of a change
// event's scalars).
func appendInt(dst []byte, x int64) []byte {
	u := uint64(x)
	if x < 0 {
		dst = append(dst, '-')
		u = -u
	}
	return appendUint(dst, u)
}

// appendUint appends the decimal form of u, as strconv.AppendUint(dst, u, 10) does.
func appendUint(dst []byte, u uint64) []byte {
	if u < 10 {
		return append(dst, byte('0'+u))
	}
	// digits: bits.Len64 gives the power of 2 below u; 1233/4096 approximates log10(2)
	n := int(uint(bits.Len64(u))*1233>>12) + 1
	if u < pow10[n-1] {
		n--
	}
	l := len(dst)
	if cap(dst)-l < n {
		dst = append(dst[:cap(dst)], make([]byte, n-(cap(dst)-l))...)
	}
	dst = dst[:l+n]
	b := dst[l : l+n : l+n]
	i := n
	for u >= 100 {
		q := u / 100
		r := (u - q*100) * 2
		i -= 2
		b[i], b[i+1] = digitPairs[r], digitPairs[r+1]
		u = q
	}
	if u >= 10 {
		b[0], b[1] = digitPairs[u*2], digitPairs[u*2+1]
	} else {
		b[0] = byte('0' + u)
	}
	return dst
}

// pow10[i] is 10^i.
var pow10 = [20]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13,
	1e14, 1e15, 1e16, 1e17, 1e18, 1e19}

const digitPairs = "00010203040506070809" +
	"10111213141516171819" +
	"20212223242526272829" +
	"30313233343536373839" +
	"40414243444546474849" +
	"50515253545556575859" +
	"60616263646566676869" +
	"70717273747576777879" +
	"80818283848586878889" +
	"90919293949596979899"
