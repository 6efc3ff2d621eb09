package wal

import "testing"

// The vectors are Kafka's (UtilsTest.testMurmur2), as signed Java ints.
func TestMurmur2KafkaVectors(t *testing.T) {
	cases := []struct {
		in   string
		want int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
		{"", 275646681},
	}
	for _, c := range cases {
		if got := int32(murmur2([]byte(c.in))); got != c.want {
			t.Errorf("murmur2(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestPartition(t *testing.T) {
	// Kafka: Utils.toPositive(murmur2("foobar")) % 50 == 16.
	if got := Partition([]byte("foobar"), 50); got != 16 {
		t.Fatalf("Partition(foobar, 50) = %d, want 16", got)
	}
	for _, k := range []string{"21", "abc", "", "a-little-bit-long-string"} {
		for n := int32(1); n < 40; n++ {
			want := int32(murmur2([]byte(k))&0x7fffffff) % n
			if got := Partition([]byte(k), n); got != want || got < 0 || got >= n {
				t.Fatalf("Partition(%q, %d) = %d, want %d", k, n, got, want)
			}
		}
	}
}
