package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Compression is the codec of a batch's records (Kafka's compression.type
// and its attribute bits 0-2). A batch is stored compressed only when that
// makes it smaller; it says its codec itself, so a topic's batches may mix
// codecs (after compression.type changed, say).
type Compression int8

const (
	Uncompressed Compression = 0
	Gzip         Compression = 1
	Snappy       Compression = 2
	LZ4          Compression = 3
	Zstd         Compression = 4
)

// attrCodec are the attribute bits that hold a batch's Compression.
const attrCodec int16 = 7

var codecNames = [...]string{"uncompressed", "gzip", "snappy", "lz4", "zstd"}

func (c Compression) String() string {
	if c >= 0 && int(c) < len(codecNames) {
		return codecNames[c]
	}
	return fmt.Sprintf("codec %d", int8(c))
}

// ParseCompression reads a compression.type value.
func ParseCompression(s string) (Compression, error) {
	for i, n := range codecNames {
		if s == n {
			return Compression(i), nil
		}
	}
	return 0, fmt.Errorf(`must be "uncompressed", "gzip", "snappy", "lz4" or "zstd" (got %q)`, s)
}

var errBadCodec = errors.New("unknown compression codec")

// The compressed records of a batch are the records' size (uvarint), then
// the codec's output: a snappy block, an LZ4 block, a zstd frame or a gzip
// stream. The size lets a reader check it against maxBatchBytes before it
// allocates, and check that the codec gave back exactly that much.

var (
	lz4Pool  = sync.Pool{New: func() any { return new(lz4.Compressor) }}
	gzipPool = sync.Pool{New: func() any { w, _ := gzip.NewWriterLevel(nil, gzip.DefaultCompression); return w }}

	zstdOnce sync.Once
	zstdEnc  *zstd.Encoder
	zstdDec  *zstd.Decoder
)

func zstdCodec() (*zstd.Encoder, *zstd.Decoder) {
	zstdOnce.Do(func() {
		// EncodeAll and DecodeAll may be called concurrently on one of each.
		zstdEnc, _ = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)), zstd.WithEncoderLevel(zstd.SpeedDefault))
		zstdDec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(maxBatchBytes))
	})
	return zstdEnc, zstdDec
}

// compressRecords appends the compressed form of the records src to dst.
// ok is false when c would not make them smaller (they are then stored
// uncompressed).
func compressRecords(dst []byte, c Compression, src []byte) ([]byte, bool) {
	if len(src) > maxBatchBytes {
		return dst, false // a reader would refuse to inflate it
	}
	start := len(dst)
	dst = binary.AppendUvarint(dst, uint64(len(src)))
	switch c {
	case Snappy:
		dst = growTo(dst, s2.MaxEncodedLen(len(src)))
		dst = dst[:len(dst)+len(s2.EncodeSnappy(dst[len(dst):cap(dst)], src))]
	case LZ4:
		dst = growTo(dst, lz4.CompressBlockBound(len(src)))
		lc := lz4Pool.Get().(*lz4.Compressor)
		n, err := lc.CompressBlock(src, dst[len(dst):cap(dst)])
		lz4Pool.Put(lc)
		if err != nil || n == 0 {
			return dst[:start], false // incompressible
		}
		dst = dst[:len(dst)+n]
	case Zstd:
		enc, _ := zstdCodec()
		dst = enc.EncodeAll(src, dst)
	case Gzip:
		w := gzipPool.Get().(*gzip.Writer)
		buf := bytes.NewBuffer(dst)
		w.Reset(buf)
		_, err := w.Write(src)
		if err == nil {
			err = w.Close()
		}
		w.Reset(io.Discard) // the pool must not keep dst
		gzipPool.Put(w)
		if err != nil {
			return dst[:start], false
		}
		dst = buf.Bytes()
	default:
		return dst[:start], false
	}
	if len(dst)-start >= len(src) {
		return dst[:start], false
	}
	return dst, true
}

// compressBatch compresses the records of the batch in buf (from
// recordsAt) into spare, after a copy of the header. It returns the
// compressed batch and buf as the next spare; or, when codec does not make
// the records smaller, buf and spare (ok false).
func compressBatch(buf, spare []byte, recordsAt int, codec Compression) (out, nextSpare []byte, ok bool) {
	z, ok := compressRecords(append(spare[:0], buf[:recordsAt]...), codec, buf[recordsAt:])
	if !ok {
		return buf, z, false
	}
	return z, buf, true
}

// growTo makes room for n more bytes after len(b).
func growTo(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), len(b)+n)
		copy(nb, b)
		return nb
	}
	return b
}

// decompressRecords inflates the compressed records src of codec c into a
// new slice (records read from it alias it).
func decompressRecords(c Compression, src []byte) ([]byte, error) {
	size, n := binary.Uvarint(src)
	if n <= 0 || size > maxBatchBytes {
		return nil, fmt.Errorf("%s records: bad size", c)
	}
	src = src[n:]
	out := make([]byte, size)
	var err error
	switch c {
	case Snappy:
		var l int
		if l, err = s2.DecodedLen(src); err == nil && l != len(out) {
			err = fmt.Errorf("inflates to %d bytes, not %d", l, len(out))
		}
		if err == nil {
			_, err = s2.Decode(out, src)
		}
	case LZ4:
		var l int
		if l, err = lz4.UncompressBlock(src, out); err == nil && l != len(out) {
			err = fmt.Errorf("inflates to %d bytes, not %d", l, len(out))
		}
	case Zstd:
		_, dec := zstdCodec()
		if out, err = dec.DecodeAll(src, out[:0]); err == nil && uint64(len(out)) != size {
			err = fmt.Errorf("inflates to %d bytes, not %d", len(out), size)
		}
	case Gzip:
		var r *gzip.Reader
		if r, err = gzip.NewReader(bytes.NewReader(src)); err == nil {
			if _, err = io.ReadFull(r, out); err == nil {
				var one [1]byte // the stream must end here, its checksum verified
				if m, rerr := r.Read(one[:]); m > 0 {
					err = fmt.Errorf("inflates to more than %d bytes", len(out))
				} else if rerr != io.EOF {
					err = rerr
				}
			}
		}
	default:
		err = errBadCodec
	}
	if err != nil {
		return nil, fmt.Errorf("%s records: %w", c, err)
	}
	return out, nil
}
