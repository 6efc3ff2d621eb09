package rest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sluice-cdc/sluice/connect"
)

// Request bodies are decoded strictly: one JSON value, no duplicate keys, no unknown fields,
// every problem answered with a 4xx whose message names the field.

// maxConfigKeys bounds the keys of one configuration.
const maxConfigKeys = 2000

// field is one key of a JSON object, in order.
type field struct {
	key string
	raw json.RawMessage
}

// readBody reads the request body (bounded by the server's limit) and checks its type.
func readBody(r *http.Request) ([]byte, *apiError) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return nil, errorf(http.StatusUnsupportedMediaType, "Content-Type must be application/json (got %q)", ct)
		}
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, errorf(http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", mbe.Limit)
		}
		return nil, badRequest("request body could not be read: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, badRequest("request body is empty: want a JSON object")
	}
	if !utf8.Valid(body) {
		return nil, badRequest("request body is not valid UTF-8")
	}
	return body, nil
}

// objectFields parses data as one JSON object and returns its fields in order; path names the
// object in messages ("" for the body).
func objectFields(data []byte, path string) ([]field, *apiError) {
	what := "request body"
	if path != "" {
		what = path
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, syntaxError(what, data, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, badRequest("%s must be a JSON object (got %s)", what, kindOf(tok))
	}
	var out []field
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, syntaxError(what, data, err)
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, syntaxError(what, data, err)
		}
		if seen[key] {
			return nil, badRequest("%s: duplicate field %q", what, join(path, key))
		}
		seen[key] = true
		out = append(out, field{key: key, raw: raw})
	}
	if _, err := dec.Token(); err != nil {
		return nil, syntaxError(what, data, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, badRequest("%s: unexpected data after the JSON object", what)
	}
	return out, nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func syntaxError(what string, data []byte, err error) *apiError {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return badRequest("%s is not valid JSON: %s (at byte %d)", what, se.Error(), se.Offset)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return badRequest("%s is not valid JSON: unexpected end", what)
	}
	return badRequest("%s is not valid JSON: %v", what, err)
}

func kindOf(tok any) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '[' {
			return "an array"
		}
		return "an object"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}

// rawKind names the JSON type of a raw value.
func rawKind(raw json.RawMessage) string {
	s := bytes.TrimSpace(raw)
	if len(s) == 0 {
		return "nothing"
	}
	switch s[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// checkFields rejects fields not in known, naming the first unknown one.
func checkFields(fields []field, path string, known ...string) *apiError {
	for _, f := range fields {
		ok := false
		for _, k := range known {
			if f.key == k {
				ok = true
				break
			}
		}
		if !ok {
			msg := fmt.Sprintf("unknown field %q", join(path, f.key))
			if s, close := connect.SuggestKey(f.key, known); close {
				msg += fmt.Sprintf("; did you mean %q?", join(path, s))
			} else {
				msg += "; known fields: " + strings.Join(known, ", ")
			}
			return badRequest("%s", msg)
		}
	}
	return nil
}

// stringValue decodes a JSON string field.
func stringValue(f field, path string) (string, *apiError) {
	var s string
	if rawKind(f.raw) != "a string" || json.Unmarshal(f.raw, &s) != nil {
		return "", badRequest("%s must be a string (got %s)", join(path, f.key), rawKind(f.raw))
	}
	return s, nil
}

// configValue decodes one configuration value: a string, or a number or boolean taken as the
// text written (Kafka Connect's JSON configs carry strings; tools often send numbers). null
// is reported by ok=false when allowNull.
func configValue(f field, path string, allowNull bool) (v string, ok bool, err *apiError) {
	raw := bytes.TrimSpace(f.raw)
	name := join(path, f.key)
	switch rawKind(raw) {
	case "a string":
		var s string
		if e := json.Unmarshal(raw, &s); e != nil {
			return "", false, badRequest("%s is not a valid string", name)
		}
		if strings.ContainsRune(s, 0) {
			return "", false, badRequest("%s must not contain NUL characters", name)
		}
		return s, true, nil
	case "a number":
		if _, e := strconv.ParseFloat(string(raw), 64); e != nil {
			return "", false, badRequest("%s is not a valid number", name)
		}
		return string(raw), true, nil
	case "a boolean":
		return string(raw), true, nil
	case "null":
		if allowNull {
			return "", false, nil
		}
	}
	return "", false, badRequest("%s must be a string, a number or a boolean (got %s)", name, rawKind(raw))
}

// configMap decodes a JSON object of configuration values. With allowNull, null values are
// returned in nulls (PATCH: remove the key).
func configMap(data []byte, path string, allowNull bool) (map[string]string, []string, *apiError) {
	fields, err := objectFields(data, path)
	if err != nil {
		return nil, nil, err
	}
	if len(fields) > maxConfigKeys {
		return nil, nil, badRequest("%s has %d keys; at most %d are allowed", orBody(path), len(fields), maxConfigKeys)
	}
	out := make(map[string]string, len(fields))
	var nulls []string
	for _, f := range fields {
		if strings.TrimSpace(f.key) == "" {
			return nil, nil, badRequest("%s has an empty key", orBody(path))
		}
		v, ok, err := configValue(f, path, allowNull)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			nulls = append(nulls, f.key)
			continue
		}
		out[f.key] = v
	}
	sort.Strings(nulls)
	return out, nulls, nil
}

func orBody(path string) string {
	if path == "" {
		return "the request body"
	}
	return path
}
