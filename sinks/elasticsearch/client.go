package elasticsearch

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	es "github.com/elastic/go-elasticsearch/v8"
)

// client is the small HTTP surface the sink needs of Elasticsearch. go-elasticsearch supplies
// the transport (node selection, authentication, the product check, compression); requests
// and responses are built and parsed here so that every bulk item is handled on its own.
type client struct {
	es *es.Client
	tr *http.Transport
}

func newClient(o *options) (*client, error) {
	tlsConf := &tls.Config{InsecureSkipVerify: o.skipVerify, MinVersion: tls.VersionTLS12} //nolint:gosec // only when the operator turns the check off
	if len(o.caCert) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(o.caCert) {
			return nil, fmt.Errorf("%s: no PEM certificate found", KeyTrustStore)
		}
		tlsConf.RootCAs = pool
	}
	if len(o.clientPEM) > 0 {
		cert, err := tls.X509KeyPair(o.clientPEM, o.clientPEM)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", KeyKeyStore, err)
		}
		tlsConf.Certificates = []tls.Certificate{cert}
	}
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: o.connTimeout}).DialContext,
		TLSHandshakeTimeout:   o.connTimeout,
		ResponseHeaderTimeout: o.readTimeout,
		IdleConnTimeout:       o.idleTime,
		MaxIdleConnsPerHost:   o.inFlight + 2,
		TLSClientConfig:       tlsConf,
	}
	if o.proxy != nil {
		tr.Proxy = http.ProxyURL(o.proxy)
	}
	urls := o.urls
	if o.tls {
		urls = make([]string, len(o.urls))
		for i, u := range o.urls {
			urls[i] = strings.Replace(u, "http://", "https://", 1)
		}
	}
	c, err := es.NewClient(es.Config{
		Addresses:           urls,
		Username:            o.username,
		Password:            o.password,
		APIKey:              o.apiKey,
		CompressRequestBody: o.compression,
		DisableRetry:        true, // the sink retries item by item
		DisableMetaHeader:   true,
		Transport:           tr,
	})
	if err != nil {
		return nil, fmt.Errorf("elasticsearch client: %w", err)
	}
	return &client{es: c, tr: tr}, nil
}

// httpError is a non-2xx answer to a whole request.
type httpError struct {
	Method, Path string
	Status       int
	Type, Reason string
}

func (e *httpError) Error() string {
	if e.Type != "" {
		return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Status, e.Type, e.Reason)
	}
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.Status, http.StatusText(e.Status))
}

// retriableStatus reports whether an HTTP status (of a request or of a bulk item) is worth
// retrying: overload (429), server errors, timeouts, and 403 blocks (read-only indices) that
// an operator lifts.
func retriableStatus(code int) bool {
	return code == http.StatusTooManyRequests || code >= 500 || code == http.StatusRequestTimeout || code == http.StatusForbidden
}

// requestRetriable reports whether a failed request is worth retrying: transport errors,
// overload, server errors, timeouts and cluster blocks. Other 4xx answers (authentication,
// a malformed request) are not.
func requestRetriable(err error) bool {
	var he *httpError
	if errors.As(err, &he) {
		if he.Status == http.StatusForbidden {
			return he.Type == "cluster_block_exception"
		}
		return retriableStatus(he.Status)
	}
	return !errors.Is(err, context.Canceled)
}

// do sends a request and returns the response body of a 2xx answer; other answers are an
// *httpError (404 included: callers that expect it check for it).
func (c *client) do(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, path, rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		if strings.HasPrefix(path, "/_bulk") {
			req.Header.Set("Content-Type", "application/x-ndjson")
		}
	}
	resp, err := c.es.Perform(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: read response: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		he := &httpError{Method: method, Path: path, Status: resp.StatusCode}
		var e struct {
			Error struct {
				Type   string `json:"type"`
				Reason string `json:"reason"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil {
			he.Type, he.Reason = e.Error.Type, e.Error.Reason
		}
		return b, he
	}
	return b, nil
}

// statusOf returns the HTTP status of a request error, 0 when it has none.
func statusOf(err error) int {
	var he *httpError
	if errors.As(err, &he) {
		return he.Status
	}
	return 0
}

// typeOf returns the Elasticsearch error type of a request error.
func typeOf(err error) string {
	var he *httpError
	if errors.As(err, &he) {
		return he.Type
	}
	return ""
}
