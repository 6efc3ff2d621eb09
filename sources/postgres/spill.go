package postgres

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pglogrepl"
)

// With pgoutput protocol 2 the server streams a large transaction while it runs, in blocks
// between Stream Start and Stream Stop, interleaved with other transactions; whether it
// commits is known only at Stream Commit or Stream Abort. Its changes are spilled, in
// arrival order, to one file per transaction, so memory holds only a write buffer per open
// transaction and a read buffer for the one being emitted.
//
// Entry format (big-endian): len uint32 | lsn uint64 | message (len bytes, the pgoutput
// message as received, type byte first).
//
// A subtransaction's changes are its file's tail from its first change on (a subtransaction
// ends before its parent or a sibling goes on), so the abort of one truncates the file there.

const (
	spillBuffer     = 64 << 10
	spillHeader     = 4 + 8
	spillDirPattern = "sluice-pgspill-"
)

// spillDir holds the spill files of one source instance.
type spillDir struct {
	dir string
}

// openSpillDir creates the instance's spill directory under root, after removing those
// that instances of the same slot left behind when they were killed.
func openSpillDir(root, slot string) (*spillDir, error) {
	prefix := spillDirPattern + slot + "-"
	if entries, err := os.ReadDir(root); err == nil {
		for _, e := range entries {
			rest, ok := strings.CutPrefix(e.Name(), prefix)
			if !ok || !e.IsDir() {
				continue
			}
			pidText, _, _ := strings.Cut(rest, "-")
			if pid, err := strconv.Atoi(pidText); err == nil && !processAlive(pid) {
				_ = os.RemoveAll(filepath.Join(root, e.Name()))
			}
		}
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("spill directory: %w", err)
	}
	dir, err := os.MkdirTemp(root, prefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, fmt.Errorf("spill directory: %w", err)
	}
	return &spillDir{dir: dir}, nil
}

func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func (d *spillDir) remove() error {
	if d == nil {
		return nil
	}
	return os.RemoveAll(d.dir)
}

// spillFile is the spilled part of one streamed transaction.
type spillFile struct {
	path string
	f    *os.File
	w    *bufio.Writer
	size int64
	subs map[uint32]int64 // offset of the first change of each (sub)transaction xid
	hdr  [spillHeader]byte
}

func (d *spillDir) create(xid uint32) (*spillFile, error) {
	path := filepath.Join(d.dir, strconv.FormatUint(uint64(xid), 10)+".spill")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create spill file: %w", err)
	}
	return &spillFile{path: path, f: f, w: bufio.NewWriterSize(f, spillBuffer), subs: map[uint32]int64{}}, nil
}

// append stores one message of (sub)transaction xid.
func (sf *spillFile) append(lsn pglogrepl.LSN, xid uint32, msg []byte) error {
	if _, ok := sf.subs[xid]; !ok {
		sf.subs[xid] = sf.size
	}
	binary.BigEndian.PutUint32(sf.hdr[:4], uint32(len(msg)))
	binary.BigEndian.PutUint64(sf.hdr[4:], uint64(lsn))
	if _, err := sf.w.Write(sf.hdr[:]); err != nil {
		return fmt.Errorf("write spill file: %w", err)
	}
	if _, err := sf.w.Write(msg); err != nil {
		return fmt.Errorf("write spill file: %w", err)
	}
	sf.size += spillHeader + int64(len(msg))
	return nil
}

// abortSub drops the changes of subtransaction sub and of everything after its first change.
func (sf *spillFile) abortSub(sub uint32) error {
	off, ok := sf.subs[sub]
	if !ok {
		return nil
	}
	if err := sf.w.Flush(); err != nil {
		return fmt.Errorf("flush spill file: %w", err)
	}
	if err := sf.f.Truncate(off); err != nil {
		return fmt.Errorf("truncate spill file: %w", err)
	}
	if _, err := sf.f.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("seek spill file: %w", err)
	}
	sf.w.Reset(sf.f)
	sf.size = off
	for x, o := range sf.subs {
		if o >= off {
			delete(sf.subs, x)
		}
	}
	return nil
}

// reader flushes the file and returns a reader of its entries from the start.
func (sf *spillFile) reader() (*spillReader, error) {
	if err := sf.w.Flush(); err != nil {
		return nil, fmt.Errorf("flush spill file: %w", err)
	}
	if _, err := sf.f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("seek spill file: %w", err)
	}
	return &spillReader{r: bufio.NewReaderSize(io.LimitReader(sf.f, sf.size), spillBuffer)}, nil
}

// remove closes and deletes the file.
func (sf *spillFile) remove() error {
	err := sf.f.Close()
	if rerr := os.Remove(sf.path); err == nil && !errors.Is(rerr, os.ErrNotExist) {
		err = rerr
	}
	return err
}

type spillReader struct {
	r   *bufio.Reader
	hdr [spillHeader]byte
	buf []byte
}

// next returns the next entry; the message is valid until the next call. io.EOF at the end.
func (sr *spillReader) next() (pglogrepl.LSN, []byte, error) {
	if _, err := io.ReadFull(sr.r, sr.hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, nil, io.EOF
		}
		return 0, nil, fmt.Errorf("read spill file: %w", err)
	}
	n := int(binary.BigEndian.Uint32(sr.hdr[:4]))
	lsn := pglogrepl.LSN(binary.BigEndian.Uint64(sr.hdr[4:]))
	if cap(sr.buf) < n {
		sr.buf = make([]byte, n)
	}
	sr.buf = sr.buf[:n]
	if _, err := io.ReadFull(sr.r, sr.buf); err != nil {
		return 0, nil, fmt.Errorf("read spill file: %w", err)
	}
	// keep one large message from pinning its buffer for the rest of the transaction
	msg := sr.buf
	if cap(sr.buf) > 1<<20 {
		sr.buf = nil
	}
	return lsn, msg, nil
}
