package snapshot

import "strconv"

// ParseInt parses the text form of an integer as strconv.ParseInt does in base 10. A server's
// form (an optional '-' and at most 19 digits) is added up directly when it has at most 18
// digits, which cannot overflow; anything else goes to strconv, whose error names the text.
// Both sources read integers of snapshot rows (and PostgreSQL of every row) as text.
func ParseInt(src []byte) (int64, error) {
	digits := src
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) <= 18 {
		if n, ok := addUp(digits); ok {
			if len(digits) < len(src) {
				return -int64(n), nil
			}
			return int64(n), nil
		}
	}
	return strconv.ParseInt(string(src), 10, 64)
}

// ParseUint parses the text form of an unsigned integer as strconv.ParseUint does in base 10:
// up to 19 digits directly, anything else through strconv.
func ParseUint(src []byte) (uint64, error) {
	if len(src) <= 19 {
		if n, ok := addUp(src); ok {
			return n, nil
		}
	}
	return strconv.ParseUint(string(src), 10, 64)
}

// addUp is the value of a non-empty run of at most 19 decimal digits; ok is false for an
// empty run or one with anything but a digit.
func addUp(digits []byte) (n uint64, ok bool) {
	for _, c := range digits {
		d := c - '0'
		if d > 9 {
			return 0, false
		}
		n = n*10 + uint64(d)
	}
	return n, len(digits) > 0
}
