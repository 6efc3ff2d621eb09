package rest_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/connect/rest"
)

// The listening server drops clients that are too slow to send their headers or their body,
// refuses oversized headers, and shuts down when its context ends.
func TestServerLimits(t *testing.T) {
	e := newEnv(t, envOptions{})
	srv, err := rest.New(rest.Options{
		Runtime: e.rt, Listeners: []rest.Listener{{Addr: "127.0.0.1:0"}},
		// The read timeout is well above the limit of the slow-headers case, so that only
		// the header timeout can end that one (net/http falls back to the read timeout).
		ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: 3 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	base := srv.URLs()[0]
	addr := strings.TrimPrefix(base, "http://")

	// closedWithin sends a partial request and expects the server to hang up in time.
	closedWithin := func(name, partial string, limit time.Duration) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, partial); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.ReadAll(bufio.NewReader(c)) // until the server closes (or answers and closes)
		if d := time.Since(start); d > limit {
			t.Fatalf("%s: the connection stayed open for %v", name, d)
		}
	}
	closedWithin("slow headers", "GET /connectors HTTP/1.1\r\nHost: x\r\n", 2*time.Second)
	closedWithin("slow body", "POST /connectors HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"name\":", 4500*time.Millisecond)

	req, _ := http.NewRequest("GET", base+"/connectors", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 100<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a 100 KiB header: %d", resp.StatusCode)
	}
	resp, err = http.Get(base + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if _, err := http.Get(base + "/health"); err == nil {
		t.Fatal("the server still answers after Run returned")
	}
}
