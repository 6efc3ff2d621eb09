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
	if len(digits) == 0 || len(digits) > 18 {
		return strconv.ParseInt(string(src), 10, 64)
	}
	var n int64
	for _, c := range digits {
		d := c - '0'
		if d > 9 {
			return strconv.ParseInt(string(src), 10, 64)
		}
		n = n*10 + int64(d)
	}
	if len(digits) < len(src) {
		n = -n
	}
	return n, nil
}

// ParseUint parses the text form of an unsigned integer as strconv.ParseUint does in base 10:
// up to 19 digits directly, anything else through strconv.
func ParseUint(src []byte) (uint64, error) {
	if len(src) == 0 || len(src) > 19 {
		return strconv.ParseUint(string(src), 10, 64)
	}
	var n uint64
	for _, c := range src {
		d := c - '0'
		if d > 9 {
			return strconv.ParseUint(string(src), 10, 64)
		}
		n = n*10 + uint64(d)
	}
	return n, nil
}
