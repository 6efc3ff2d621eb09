package postgres

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-cdc/sluice/connect"
	"github.com/sluice-cdc/sluice/sources/snapshot"
)

// settings is the validated configuration in typed form.
type settings struct {
	host, user, password, dbname     string
	port                             int
	sslMode, sslRootCert, sslCert    string
	sslKey                           string
	connectTimeout                   time.Duration
	prefix                           string
	slot, publication, pubMode       string
	slotDropOnStop                   bool
	slotMaxRetries                   int
	slotRetryDelay                   time.Duration
	filter                           filter
	keyColumns                       []keyColumnsRule
	masks                            []columnMask
	snapshotMode                     string
	fetchSize                        int
	heartbeat                        time.Duration
	heartbeatQuery                   string
	tombstones                       bool
	decimalMode, binaryMode          string
	timeMode, intervalMode, hstoreMd string
	identityAutoset                  []identityRule
	skip                             map[connect.Op]bool
	statusInterval                   time.Duration
	maxBatch, queueSize              int
	protoVersion                     int
	spillDir                         string
	// replParams are extra run-time parameters of the replication connection (tests)
	replParams map[string]string
	// incr are the incremental snapshot settings; maxSlotLag pauses chunks above this slot lag
	incr       snapshot.Settings
	maxSlotLag int64
	// rawFilter is schema.include/exclude and table.include/exclude as configured
	rawFilter [4][]string
}

func settingsFrom(cfg connect.Config) (*settings, error) {
	s := &settings{
		host:           cfg.String(KeyHostname),
		port:           int(cfg.Int(KeyPort)),
		user:           cfg.String(KeyUser),
		password:       cfg.String(KeyPassword),
		dbname:         cfg.String(KeyDBName),
		sslMode:        cfg.Enum(KeySSLMode),
		sslRootCert:    cfg.String(KeySSLRootCert),
		sslCert:        cfg.String(KeySSLCert),
		sslKey:         cfg.String(KeySSLKey),
		connectTimeout: cfg.Millis(KeyConnectTimeout),
		prefix:         cfg.String(KeyTopicPrefix),
		slot:           cfg.String(KeySlotName),
		publication:    cfg.String(KeyPublicationName),
		pubMode:        cfg.Enum(KeyPublicationMode),
		slotDropOnStop: cfg.Bool(KeySlotDropOnStop),
		slotMaxRetries: int(cfg.Int(KeySlotMaxRetries)),
		slotRetryDelay: cfg.Millis(KeySlotRetryDelay),
		snapshotMode:   cfg.Enum(KeySnapshotMode),
		fetchSize:      int(cfg.Int(KeySnapshotFetchSize)),
		heartbeat:      cfg.Millis(KeyHeartbeatInterval),
		heartbeatQuery: cfg.String(KeyHeartbeatQuery),
		tombstones:     cfg.Bool(KeyTombstones),
		decimalMode:    cfg.Enum(KeyDecimalMode),
		binaryMode:     cfg.Enum(KeyBinaryMode),
		timeMode:       cfg.Enum(KeyTimePrecision),
		intervalMode:   cfg.Enum(KeyIntervalMode),
		hstoreMd:       cfg.Enum(KeyHstoreMode),
		statusInterval: cfg.Millis(KeyStatusInterval),
		maxBatch:       int(cfg.Int(KeyMaxBatchSize)),
		queueSize:      int(cfg.Int(KeyMaxQueueSize)),
		protoVersion:   int(cfg.Int(KeyProtocolVersion)),
		spillDir:       cfg.String(KeySpillDir),
		skip:           map[connect.Op]bool{},
		incr:           snapshot.SettingsFrom(cfg),
		maxSlotLag:     cfg.Int(KeyMaxSlotLagBytes),
	}
	s.rawFilter = [4][]string{cfg.List(KeySchemaInclude), cfg.List(KeySchemaExclude), cfg.List(KeyTableInclude), cfg.List(KeyTableExclude)}
	if s.incr.Watermark == snapshot.WatermarkAuto {
		s.incr.Watermark = snapshot.WatermarkMessage
	}
	if s.snapshotMode == SnapshotNever {
		s.snapshotMode = SnapshotNoData
	}
	if s.spillDir == "" {
		s.spillDir = os.TempDir()
	}
	var err error
	if s.filter, err = newFilter(cfg); err != nil {
		return nil, err
	}
	if s.keyColumns, err = parseKeyColumns(cfg.String(KeyMessageKeyColumns)); err != nil {
		return nil, fmt.Errorf("%s: %w", KeyMessageKeyColumns, err)
	}
	if s.identityAutoset, err = parseIdentityAutoset(cfg.String(KeyIdentityAutoset)); err != nil {
		return nil, fmt.Errorf("%s: %w", KeyIdentityAutoset, err)
	}
	masks, ferrs := parseMasks(cfg)
	if len(ferrs) > 0 {
		return nil, ferrs[0]
	}
	s.masks = masks
	for _, op := range cfg.List(KeySkippedOps) {
		if o := strings.ToLower(op); o != "none" {
			s.skip[connect.Op(o[0])] = true
		}
	}
	return s, nil
}

// filter selects the captured schemas, tables and columns (Debezium's include/exclude lists:
// whole-name, case-insensitive regular expressions).
type filter struct {
	schemaInc, schemaExc []*regexp.Regexp
	tableInc, tableExc   []*regexp.Regexp
	columnInc, columnExc []*regexp.Regexp
}

func newFilter(cfg connect.Config) (filter, error) {
	var f filter
	for _, x := range []struct {
		key string
		dst *[]*regexp.Regexp
	}{
		{KeySchemaInclude, &f.schemaInc}, {KeySchemaExclude, &f.schemaExc},
		{KeyTableInclude, &f.tableInc}, {KeyTableExclude, &f.tableExc},
		{KeyColumnInclude, &f.columnInc}, {KeyColumnExclude, &f.columnExc},
	} {
		for _, p := range cfg.List(x.key) {
			re, err := compileAnchored(p)
			if err != nil {
				return f, fmt.Errorf("%s: bad regular expression %q: %w", x.key, p, err)
			}
			*x.dst = append(*x.dst, re)
		}
	}
	return f, nil
}

func anyMatch(res []*regexp.Regexp, s string) bool {
	for _, re := range res {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

// table reports whether schema.table is captured. System schemas never are.
func (f *filter) table(schema, table string) bool {
	if schema == "pg_catalog" || schema == "information_schema" || strings.HasPrefix(schema, "pg_toast") || strings.HasPrefix(schema, "pg_temp") {
		return false
	}
	if len(f.schemaInc) > 0 && !anyMatch(f.schemaInc, schema) {
		return false
	}
	if anyMatch(f.schemaExc, schema) {
		return false
	}
	full := schema + "." + table
	if len(f.tableInc) > 0 && !anyMatch(f.tableInc, full) {
		return false
	}
	return !anyMatch(f.tableExc, full)
}

// column reports whether a column of a captured table is kept in row images.
func (f *filter) column(schema, table, column string) bool {
	if len(f.columnInc) == 0 && len(f.columnExc) == 0 {
		return true
	}
	full := schema + "." + table + "." + column
	if len(f.columnInc) > 0 && !anyMatch(f.columnInc, full) {
		return false
	}
	return !anyMatch(f.columnExc, full)
}

// keyColumnsRule is one entry of message.key.columns.
type keyColumnsRule struct {
	table   *regexp.Regexp
	columns []string
}

func parseKeyColumns(v string) ([]keyColumnsRule, error) {
	var out []keyColumnsRule
	for _, part := range strings.Split(v, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		i := strings.LastIndexByte(part, ':')
		if i <= 0 || i == len(part)-1 {
			return nil, fmt.Errorf("want <table regex>:<column>[,<column>...] entries separated by ';' (got %q)", part)
		}
		re, err := compileAnchored(strings.TrimSpace(part[:i]))
		if err != nil {
			return nil, fmt.Errorf("bad table regular expression in %q: %v", part, err)
		}
		cols := connect.SplitList(part[i+1:])
		if len(cols) == 0 {
			return nil, fmt.Errorf("no columns in %q", part)
		}
		out = append(out, keyColumnsRule{table: re, columns: cols})
	}
	return out, nil
}

// keyColumnsFor returns the configured key columns of schema.table, or nil.
func (s *settings) keyColumnsFor(schema, table string) []string {
	full := schema + "." + table
	for _, r := range s.keyColumns {
		if r.table.MatchString(full) {
			return r.columns
		}
	}
	return nil
}

// identityRule is one entry of replica.identity.autoset.values.
type identityRule struct {
	table    *regexp.Regexp
	identity string // FULL, DEFAULT, NOTHING or USING INDEX <name>
}

func parseIdentityAutoset(v string) ([]identityRule, error) {
	var out []identityRule
	for _, part := range connect.SplitList(v) {
		i := strings.LastIndexByte(part, ':')
		if i <= 0 || i == len(part)-1 {
			return nil, fmt.Errorf("want <table regex>:FULL|DEFAULT|NOTHING|INDEX <index> entries separated by ',' (got %q)", part)
		}
		re, err := compileAnchored(strings.TrimSpace(part[:i]))
		if err != nil {
			return nil, fmt.Errorf("bad table regular expression in %q: %v", part, err)
		}
		id := strings.TrimSpace(part[i+1:])
		fields := strings.Fields(id)
		switch {
		case len(fields) == 1 && (strings.EqualFold(id, "FULL") || strings.EqualFold(id, "DEFAULT") || strings.EqualFold(id, "NOTHING")):
			id = strings.ToUpper(id)
		case len(fields) == 2 && strings.EqualFold(fields[0], "INDEX"):
			id = "USING INDEX " + quoteIdent(fields[1])
		default:
			return nil, fmt.Errorf("replica identity must be FULL, DEFAULT, NOTHING or INDEX <index> (got %q)", id)
		}
		out = append(out, identityRule{table: re, identity: id})
	}
	return out, nil
}

// columnMask rewrites the values of matching columns.
type columnMask struct {
	columns []*regexp.Regexp
	kind    byte // 'm' mask with stars, 'h' hash, 't' truncate
	n       int
	newHash func() hash.Hash
	salt    string
}

var (
	maskWithRe   = regexp.MustCompile(`^column\.mask\.with\.(\d+)\.chars$`)
	maskHashRe   = regexp.MustCompile(`^column\.mask\.hash\.([A-Za-z0-9-]+)\.with\.salt\.(.*)$`)
	truncateToRe = regexp.MustCompile(`^column\.truncate\.to\.(\d+)\.chars$`)
)

func parseMasks(cfg connect.Config) ([]columnMask, []connect.FieldError) {
	var out []columnMask
	var errs []connect.FieldError
	for key, v := range cfg.Raw() {
		var m columnMask
		switch {
		case strings.HasPrefix(key, KeyMaskWith):
			g := maskWithRe.FindStringSubmatch(key)
			if g == nil {
				errs = append(errs, connect.FieldError{Key: key, Message: "want column.mask.with.<n>.chars"})
				continue
			}
			m.kind, m.n = 'm', atoiOr(g[1], -1)
		case strings.HasPrefix(key, KeyMaskHash):
			g := maskHashRe.FindStringSubmatch(key)
			if g == nil {
				errs = append(errs, connect.FieldError{Key: key, Message: "want column.mask.hash.<algorithm>.with.salt.<salt>"})
				continue
			}
			m.kind, m.salt = 'h', g[2]
			switch strings.ToUpper(g[1]) {
			case "MD5":
				m.newHash = md5.New
			case "SHA-1", "SHA1":
				m.newHash = sha1.New
			case "SHA-256", "SHA256":
				m.newHash = sha256.New
			case "SHA-384", "SHA384":
				m.newHash = sha512.New384
			case "SHA-512", "SHA512":
				m.newHash = sha512.New
			default:
				errs = append(errs, connect.FieldError{Key: key, Message: fmt.Sprintf("hash algorithm must be MD5, SHA-1, SHA-256, SHA-384 or SHA-512 (got %q)", g[1])})
				continue
			}
		case strings.HasPrefix(key, KeyTruncateTo):
			g := truncateToRe.FindStringSubmatch(key)
			if g == nil {
				errs = append(errs, connect.FieldError{Key: key, Message: "want column.truncate.to.<n>.chars"})
				continue
			}
			m.kind, m.n = 't', atoiOr(g[1], -1)
		default:
			continue
		}
		if m.kind != 'h' && (m.n < 0 || m.n > 1<<20) {
			errs = append(errs, connect.FieldError{Key: key, Message: "the length must be 0..1048576"})
			continue
		}
		for _, p := range connect.SplitList(v) {
			re, err := compileAnchored(p)
			if err != nil {
				errs = append(errs, connect.FieldError{Key: key, Message: fmt.Sprintf("bad regular expression %q: %v", p, err)})
				continue
			}
			m.columns = append(m.columns, re)
		}
		out = append(out, m)
	}
	return out, errs
}

func atoiOr(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}

// masksFor returns the masks applying to a column, in configuration order of kind: truncate,
// then mask or hash.
func (s *settings) masksFor(schema, table, column string) []columnMask {
	full := schema + "." + table + "." + column
	var out []columnMask
	for _, m := range s.masks {
		if anyMatch(m.columns, full) {
			out = append(out, m)
		}
	}
	return out
}

// apply rewrites v (a decoded value) by the mask.
func (m *columnMask) apply(v any) any {
	if v == nil {
		return nil
	}
	switch m.kind {
	case 'm':
		return strings.Repeat("*", m.n)
	case 't':
		if s, ok := v.(string); ok && utf8.RuneCountInString(s) > m.n {
			n := 0
			for i := range s {
				if n == m.n {
					return s[:i]
				}
				n++
			}
		}
		return v
	case 'h':
		h := m.newHash()
		h.Write([]byte(m.salt))
		switch x := v.(type) {
		case string:
			h.Write([]byte(x))
		case []byte:
			h.Write(x)
		default:
			b, _ := connect.AppendJSON(nil, v)
			h.Write(b)
		}
		return hex.EncodeToString(h.Sum(nil))
	}
	return v
}

// quoteIdent quotes a PostgreSQL identifier.
func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// quoteLiteral quotes a PostgreSQL string literal (standard_conforming_strings on).
func quoteLiteral(s string) string {
	return `'` + strings.ReplaceAll(s, `'`, `''`) + `'`
}

// qualified returns "schema"."table".
func qualified(schema, table string) string {
	return quoteIdent(schema) + "." + quoteIdent(table)
}
