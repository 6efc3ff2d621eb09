package runtime

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The stored connector records of testdata/configs must decode forever.
func TestStoredConnectorGolden(t *testing.T) {
	for file, want := range map[string]storedConnector{
		"v1_api.json": {V: 1, Name: "inventory", Origin: OriginAPI, Class: "mysql", State: StatePaused, Generation: 2,
			Config: map[string]string{"connector.class": "mysql", "database.password": "${env:PW}", "topic.prefix": "shop"}},
		"v1_file.json":    {V: 1, Name: "orders", Origin: OriginFile, State: StateStopped, Generation: 1},
		"v1_deleted.json": {V: 1, Name: "old", Deleted: true, Generation: 3},
	} {
		data, err := os.ReadFile(filepath.Join("testdata", "configs", file))
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeStored([]byte(want.Name), data)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("%s (-want +got):\n%s", file, diff)
		}
		again, err := decodeStored([]byte(want.Name), got.encode())
		if err != nil || !cmp.Equal(got, again) {
			t.Fatalf("%s: re-encoded record decodes as %+v, %v", file, again, err)
		}
	}
}

func TestStoredConnectorRejects(t *testing.T) {
	for _, tc := range []struct{ key, value, err string }{
		{"a", `{"v":2,"name":"a","origin":"api"}`, `stored connector "a": unknown version 2`},
		{"a", `{"v":1,"name":"b","origin":"api"}`, `stored connector "a": the record names "b"`},
		{"a", `{"v":1,"name":"a","origin":"api","state":"RESTARTING"}`, `stored connector "a": unknown target state "RESTARTING"`},
		{"a", `{"v":1,"name":"a","origin":"cloud"}`, `stored connector "a": unknown origin "cloud"`},
		{"a", `{"v":1,"name":"a","origin":"api","extra":1}`, `stored connector "a": json: unknown field "extra"`},
	} {
		if _, err := decodeStored([]byte(tc.key), []byte(tc.value)); err == nil || err.Error() != tc.err {
			t.Errorf("%s: error %v, want %q", tc.value, err, tc.err)
		}
	}
}

func FuzzDecodeStored(f *testing.F) {
	for _, file := range []string{"v1_api.json", "v1_file.json", "v1_deleted.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", "configs", file))
		if err != nil {
			f.Fatal(err)
		}
		f.Add([]byte("inventory"), data)
	}
	f.Fuzz(func(t *testing.T, key, value []byte) {
		s, err := decodeStored(key, value)
		if err != nil {
			return
		}
		again, err := decodeStored(key, s.encode())
		if err != nil || !cmp.Equal(s, again) {
			t.Fatalf("decoded %+v re-encodes to %+v, %v", s, again, err)
		}
	})
}
