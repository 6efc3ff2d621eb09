package rest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client calls the admin API (the sluice CLI's client commands use it).
type Client struct {
	// BaseURL is the API's address, e.g. http://127.0.0.1:8083.
	BaseURL string
	// Token is sent as a bearer token when set.
	Token string
	// HTTP is the client to use; nil is a client with a 10 minute timeout.
	HTTP *http.Client
}

// ClientError is an answer other than a success: its status and the API's message.
type ClientError struct {
	Status  int
	Message string
}

func (e *ClientError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// NewClient returns a client of the API at base; insecure skips TLS verification (for
// self-signed certificates).
func NewClient(base, token string, insecure bool) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if insecure {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for explicitly
	}
	return &Client{BaseURL: strings.TrimSuffix(base, "/"), Token: token, HTTP: &http.Client{Transport: tr, Timeout: 10 * time.Minute}}
}

// Path joins escaped path segments: Path("connectors", name, "status").
func Path(segs ...string) string {
	var b strings.Builder
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}

// Do sends a request with body (nil, []byte sent as is, or a value encoded as JSON) and decodes
// a JSON answer into out (nil: discard). It returns the status.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) (int, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(body)
		if err != nil {
			return 0, fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return 0, err
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Minute}
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) && strings.Contains(err.Error(), "connection refused") {
			return 0, fmt.Errorf("no sluice API at %s (is `sluice run` running? set --server or SLUICE_SERVER)", c.BaseURL)
		}
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Code    int    `json:"error_code"`
			Message string `json:"message"`
		}
		if json.Unmarshal(data, &e) != nil || e.Message == "" {
			e.Message = strings.TrimSpace(string(data))
		}
		return resp.StatusCode, &ClientError{Status: resp.StatusCode, Message: e.Message}
	}
	if out != nil && len(bytes.TrimSpace(data)) > 0 {
		if raw, ok := out.(*json.RawMessage); ok {
			*raw = append((*raw)[:0], data...)
			return resp.StatusCode, nil
		}
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode answer: %w", err)
		}
	}
	return resp.StatusCode, nil
}
