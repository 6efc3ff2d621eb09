package raft

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	pb "go.etcd.io/raft/v3/raftpb"
)

// recordingHandler keeps the Raft messages it is given.
type recordingHandler struct {
	mu   sync.Mutex
	msgs []*pb.Message
	got  chan struct{}
}

func (h *recordingHandler) raftMessage(_ uint64, _ groupKey, m *pb.Message) {
	h.mu.Lock()
	h.msgs = append(h.msgs, m)
	h.mu.Unlock()
	h.got <- struct{}{}
}

func (h *recordingHandler) request(context.Context, uint64, uint8, []byte) ([]byte, error) {
	return nil, nil
}

// TestReadLoopReusesNoMessageBytes sends Raft messages of the same size
// one after the other: the connection reads each into the same buffer,
// so a message handed to the group must own its bytes (entries, context)
// and keep them once the next frame is read.
func TestReadLoopReusesNoMessageBytes(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	h := &recordingHandler{got: make(chan struct{}, 8)}
	c := newConn(b, 2)
	defer c.close(net.ErrClosed)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.readLoop(context.Background(), bufio.NewReader(b), h, make(chan struct{}, 1), &wg)
	}()
	tr := &transport{self: 1, peers: map[uint64]*peer{2: {id: 2, changed: make(chan struct{})}}}
	out := newConn(a, 1)
	tr.peers[2].conn = out
	go out.writeLoop()
	msg := func(fill byte) *pb.Message {
		data := make([]byte, 300)
		for i := range data {
			data[i] = fill
		}
		return &pb.Message{Type: pb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)),
			Context: []byte{fill, fill}, Entries: []*pb.Entry{{Index: new(uint64(fill)), Term: new(uint64(1)), Data: data}}}
	}
	want := []*pb.Message{msg('a'), msg('b'), msg('c')}
	for _, m := range want {
		if failed := tr.send(groupKey{topic: "t"}, []*pb.Message{m}); len(failed) > 0 {
			t.Fatalf("send to %v failed", failed)
		}
		<-h.got
	}
	out.close(net.ErrClosed)
	c.close(net.ErrClosed)
	wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	text := func(ms []*pb.Message) (out []string) {
		for _, m := range ms {
			out = append(out, m.String())
		}
		return out
	}
	if diff := cmp.Diff(text(want), text(h.msgs)); diff != "" {
		t.Errorf("messages received (-want +got):\n%s", diff)
	}
}

// scribbler takes a buffer from the frame pool whenever the writer flushes
// into the connection and overwrites it: a buffer in the pool is free, so
// this must never change a frame still being written.
type scribbler struct{ net.Conn }

func (s scribbler) Write(p []byte) (int, error) {
	b := getFrame(1)
	b = b[:cap(b)]
	for i := range b {
		b[i] = 0xee
	}
	return s.Conn.Write(p)
}

// TestWriteLoopKeepsFrameUntilWritten: a queued frame goes back to the pool
// only once the writer copied all of it. A frame that does not fit in what
// is left of the write buffer is copied in two parts with a flush between
// them, and the flush takes a buffer from the pool: the second part must
// still be the frame's own bytes.
func TestWriteLoopKeepsFrameUntilWritten(t *testing.T) {
	for round := range 20 {
		a, b := net.Pipe()
		c := newConn(scribbler{a}, 2)
		// first a frame too large to pool that fills the write buffer but
		// 6 KB, then a pooled one of 20 KB
		big := frame(frameRaft, bytes.Repeat([]byte{'b'}, 250<<10))
		payload := make([]byte, 20<<10)
		for i := range payload {
			payload[i] = byte(i % 251)
		}
		small := getFrame(frameHeader + len(payload))
		small = sealFrame(append(small[:frameHeader], payload...), frameRaft)
		if !c.trySend(big) || !c.trySend(small) {
			t.Fatal("frames not queued")
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.writeLoop()
		}()
		br := bufio.NewReader(b)
		for i, want := range [][]byte{big[frameHeader:], payload} {
			kind, got, err := readFrame(br)
			if err != nil {
				t.Fatalf("round %d frame %d: %v", round, i, err)
			}
			if kind != frameRaft || !bytes.Equal(got, want) {
				n := 0
				for n < min(len(got), len(want)) && got[n] == want[n] {
					n++
				}
				t.Fatalf("round %d frame %d: kind %d, %d bytes differing from byte %d on, want kind %d and the %d bytes queued",
					round, i, kind, len(got), n, frameRaft, len(want))
			}
		}
		c.close(net.ErrClosed)
		<-done
		b.Close()
	}
}
