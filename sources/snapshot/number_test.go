package snapshot

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// numberTexts are edge cases of integer text, the server's and any other, and 10,000 random
// values of every magnitude.
func numberTexts() []string {
	texts := []string{"0", "-0", "7", "-7", "+7", "", "-", "--1", "1-", " 1", "1 ", "0x10", "1_000", "१",
		"999999999999999999", "-999999999999999999", "1000000000000000000", "-1000000000000000000",
		"9223372036854775807", "-9223372036854775808", "9223372036854775808", "-9223372036854775809",
		"9999999999999999999", "10000000000000000000", "18446744073709551615", "18446744073709551616",
		"00000000000000000001", "0000000000000000000", "123456789012345678901234567890", "12a", ":", "/"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		n := rng.Uint64() >> rng.IntN(64)
		texts = append(texts, strconv.FormatInt(int64(n), 10), strconv.FormatUint(n, 10))
	}
	return texts
}

// ParseInt agrees with strconv.ParseInt on every text: the value, and whether it is an error.
func TestParseInt(t *testing.T) {
	for _, s := range numberTexts() {
		want, wantErr := strconv.ParseInt(s, 10, 64)
		got, err := ParseInt([]byte(s))
		if got != want || (err == nil) != (wantErr == nil) {
			t.Fatalf("ParseInt(%q) = %d, %v; strconv.ParseInt: %d, %v", s, got, err, want, wantErr)
		}
	}
}

// ParseUint agrees with strconv.ParseUint on every text.
func TestParseUint(t *testing.T) {
	for _, s := range numberTexts() {
		want, wantErr := strconv.ParseUint(s, 10, 64)
		got, err := ParseUint([]byte(s))
		if got != want || (err == nil) != (wantErr == nil) {
			t.Fatalf("ParseUint(%q) = %d, %v; strconv.ParseUint: %d, %v", s, got, err, want, wantErr)
		}
	}
}
