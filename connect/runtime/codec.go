package runtime

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-cdc/sluice/connect"
)

// The log's encoding of a record: the key and the value as the JSON of the data model
// (connect.AppendJSON; a nil key or value is stored as null, i.e. no bytes), the headers as
// they are, and Record.Version as the header connect.HeaderVersion in decimal (absent for 0).

// arena is a byte buffer that encoded keys, values and header values of one batch are cut from,
// so encoding a batch allocates a few large buffers instead of three small ones per record.
type arena struct {
	buf []byte
	// version is the last Version header value cut from buf, until buf is reset: the records
	// of a transaction or a snapshot share their Version
	version      int64
	versionBytes []byte
}

func (a *arena) reset() { a.buf, a.versionBytes = a.buf[:0], nil }

// take returns buf[start:] as an independent slice (its capacity ends at its length, so later
// appends to the arena never write into it).
func (a *arena) take(start int) []byte { return a.buf[start:len(a.buf):len(a.buf)] }

// encodeKey returns the log bytes of a record key (nil for a nil key). A nil memo renders every
// key whole. A RawJSON key is returned as it is, in the source's memory: the caller keeps the
// source batch unreleased until the bytes are appended.
func (a *arena) encodeKey(key any, memo *connect.JSONMemo) ([]byte, error) {
	if key == nil {
		return nil, nil
	}
	if raw, ok := key.(connect.RawJSON); ok && len(raw) > 0 {
		return raw[:len(raw):len(raw)], nil // not copied: see sourceBatch.release
	}
	start := len(a.buf)
	var err error
	if a.buf, err = connect.AppendJSONMemo(a.buf, key, memo); err != nil {
		a.buf = a.buf[:start]
		return nil, fmt.Errorf("encode key: %w", err)
	}
	return a.take(start), nil
}

// encodeValue returns the log bytes of a record value (nil for a tombstone).
// A nil memo renders every value whole. A RawJSON value is returned as encodeKey returns one.
func (a *arena) encodeValue(v any, memo *connect.JSONMemo) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	if raw, ok := v.(connect.RawJSON); ok && len(raw) > 0 {
		return raw[:len(raw):len(raw)], nil // not copied: see sourceBatch.release
	}
	start := len(a.buf)
	var err error
	if a.buf, err = connect.AppendJSONMemo(a.buf, v, memo); err != nil {
		a.buf = a.buf[:start]
		return nil, fmt.Errorf("encode value: %w", err)
	}
	return a.take(start), nil
}

// encodeHeaders returns the log headers of r, appending them to hs (a slab shared by the
// batch; the result's capacity ends at its length).
func (a *arena) encodeHeaders(hs []LogHeader, r *connect.Record) ([]LogHeader, []LogHeader) {
	start := len(hs)
	for _, h := range r.Headers {
		if h.Key == connect.HeaderVersion {
			continue
		}
		// copied: the source may reuse the record's memory once the batch is routed
		// (connect.Batch.Release)
		b := len(a.buf)
		a.buf = append(a.buf, h.Value...)
		v := a.take(b)
		if h.Value == nil {
			v = nil
		}
		hs = append(hs, LogHeader{Key: strings.Clone(h.Key), Value: v})
	}
	if r.Version != 0 {
		if a.versionBytes == nil || a.version != r.Version {
			b := len(a.buf)
			a.buf = strconv.AppendInt(a.buf, r.Version, 10)
			a.version, a.versionBytes = r.Version, a.take(b)
		}
		hs = append(hs, LogHeader{Key: connect.HeaderVersion, Value: a.versionBytes})
	}
	if len(hs) == start {
		return hs, nil
	}
	return hs, hs[start:len(hs):len(hs)]
}

// DecodeError is a log record that is not valid JSON of the data model; Stage names the part
// (KEY_CONVERTER, VALUE_CONVERTER or HEADER_CONVERTER, as Kafka Connect's dead-letter headers).
type DecodeError struct {
	Stage string
	Err   error
}

func (e *DecodeError) Error() string { return e.Err.Error() }
func (e *DecodeError) Unwrap() error { return e.Err }

// DecodeRecord turns a stored record back into a connect.Record of topic/partition. Header
// values are copied, so the result does not alias lr.
func DecodeRecord(topic string, partition int32, lr *LogRecord) (connect.Record, error) {
	return decodeRecord(nil, topic, partition, lr)
}

// decodeRecord is DecodeRecord through dec, whose slabs the record then shares with the other
// records dec decoded (nil: ParseJSON, nothing shared).
func decodeRecord(dec *connect.JSONDecoder, topic string, partition int32, lr *LogRecord) (connect.Record, error) {
	parse := connect.ParseJSON
	if dec != nil {
		parse = dec.Decode
	}
	r := connect.Record{Topic: topic, Partition: partition, Offset: lr.Offset, Timestamp: lr.Timestamp}
	if lr.Key != nil {
		k, err := parse(lr.Key)
		if err != nil {
			return r, &DecodeError{Stage: stageKeyConverter, Err: fmt.Errorf("decode key: %w", err)}
		}
		r.Key = k
	}
	if lr.Value != nil {
		v, err := parse(lr.Value)
		if err != nil {
			return r, &DecodeError{Stage: stageValueConverter, Err: fmt.Errorf("decode value: %w", err)}
		}
		r.Value = v
	}
	others := 0
	for _, h := range lr.Headers {
		if h.Key == connect.HeaderVersion {
			n, err := parseVersion(h.Value)
			if err != nil {
				return r, &DecodeError{Stage: stageHeaderConverter, Err: fmt.Errorf("decode header %s: %q is not an integer", h.Key, h.Value)}
			}
			r.Version = n
			continue
		}
		others++
	}
	if others > 0 { // most records carry the version alone
		r.Headers = make(connect.Headers, 0, others)
		for _, h := range lr.Headers {
			if h.Key != connect.HeaderVersion {
				r.Headers = append(r.Headers, connect.Header{Key: h.Key, Value: bytes.Clone(h.Value)})
			}
		}
	}
	return r, nil
}

// parseVersion parses a version header as strconv.ParseInt(s, 10, 64) does, without
// converting it to a string first.
func parseVersion(b []byte) (int64, error) {
	if len(b) == 0 || len(b) > 19 || len(b) > 1 && b[0] == '0' {
		return strconv.ParseInt(string(b), 10, 64)
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return strconv.ParseInt(string(b), 10, 64)
		}
		n = n*10 + int64(c-'0')
	}
	if n < 0 { // 19 digits past the int64 range
		return strconv.ParseInt(string(b), 10, 64)
	}
	return n, nil
}

// RenderJSON appends one stored record as a JSON line's object, the way `sluice topics tail`
// and the inspect API show it: {"topic","partition","offset","timestamp","key","value",
// "headers"}. Key and value are rendered as the JSON they are stored as; bytes that are not
// JSON render as a string.
func RenderJSON(dst []byte, topic string, partition int32, lr *LogRecord) []byte {
	dst = append(dst, `{"topic":`...)
	dst = appendJSONString(dst, topic)
	dst = append(dst, `,"partition":`...)
	dst = strconv.AppendInt(dst, int64(partition), 10)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, lr.Offset, 10)
	if !lr.Timestamp.IsZero() {
		dst = append(dst, `,"timestamp":`...)
		dst = strconv.AppendInt(dst, lr.Timestamp.UnixMilli(), 10)
	}
	dst = append(dst, `,"key":`...)
	dst = appendRaw(dst, lr.Key)
	dst = append(dst, `,"value":`...)
	dst = appendRaw(dst, lr.Value)
	if len(lr.Headers) > 0 {
		dst = append(dst, `,"headers":{`...)
		for i, h := range lr.Headers {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, h.Key)
			dst = append(dst, ':')
			if h.Value == nil {
				dst = append(dst, "null"...)
			} else {
				dst = appendJSONString(dst, string(h.Value))
			}
		}
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

func appendRaw(dst, b []byte) []byte {
	if b == nil {
		return append(dst, "null"...)
	}
	if _, err := connect.ParseJSON(b); err == nil {
		return append(dst, b...)
	}
	return appendJSONString(dst, string(b))
}

func appendJSONString(dst []byte, s string) []byte {
	out, _ := connect.AppendJSON(dst, s)
	return out
}
