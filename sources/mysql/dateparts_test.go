package mysql

import (
	"regexp"
	"strconv"
	"testing"
)

// refDateParts is dateParts written the slow, obvious way.
var refDate = regexp.MustCompile(`^([0-9]{4})-([0-9]{2})-([0-9]{2})(?:[ T]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,6}))?)?$`)

func refDateParts(s string) (p [7]int, ok bool) {
	m := refDate.FindStringSubmatch(s)
	if m == nil {
		return p, false
	}
	for i := 1; i <= 6; i++ {
		if m[i] != "" {
			p[i-1], _ = strconv.Atoi(m[i])
		}
	}
	if f := m[7]; f != "" {
		for len(f) < 6 {
			f += "0"
		}
		p[6], _ = strconv.Atoi(f)
	}
	return p, true
}

// dateParts reads what the server's text for DATE, DATETIME and TIMESTAMP values holds and
// refuses anything else: every byte of each form replaced by every other byte, and every
// length, agree with a regular-expression parse.
func TestDateParts(t *testing.T) {
	forms := []string{"2024-05-06", "2024-05-06 07:08:09", "2024-05-06T07:08:09", "9999-12-31 23:59:59.999999",
		"0000-00-00 00:00:00", "2024-00-06", "1970-01-01 00:00:00.5", "2024-05-06 07:08:09.123"}
	check := func(s string) {
		t.Helper()
		want, ok := refDateParts(s)
		y, mo, d, h, mi, sec, usec, zero, err := dateParts([]byte(s))
		if ok != (err == nil) {
			t.Fatalf("dateParts(%q): error %v, want ok %v", s, err, ok)
		}
		if !ok {
			if want := "malformed date/time " + strconv.Quote(s); err.Error() != want {
				t.Fatalf("dateParts(%q): error %q, want %q", s, err, want)
			}
			return
		}
		if got := [7]int{y, mo, d, h, mi, sec, usec}; got != want || zero != (mo == 0 || d == 0) {
			t.Fatalf("dateParts(%q) = %v zero %v, want %v", s, got, zero, want)
		}
		if y2, mo2, d2, h2, mi2, sec2, usec2, zero2, err2 := dateParts(s); [7]int{y2, mo2, d2, h2, mi2, sec2, usec2} != want || zero2 != zero || err2 != nil {
			t.Fatalf("dateParts(%q) as a string differs", s)
		}
	}
	for _, f := range forms {
		for n := 0; n <= len(f)+1; n++ {
			check((f + "7")[:n])
		}
		for i := 0; i < len(f); i++ {
			for c := 0; c < 256; c++ {
				b := []byte(f)
				b[i] = byte(c)
				check(string(b))
			}
		}
		check(f + ".1234567")
	}
}
