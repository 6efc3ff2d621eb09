package mysql

import (
	"encoding/hex"
	"hash"
	"regexp"
	"strings"

	"github.com/sluice-cdc/sluice/connect"
)

// systemDatabases are never captured.
var systemDatabases = map[string]bool{"mysql": true, "sys": true, "performance_schema": true, "information_schema": true}

// filter decides which databases, tables and columns are captured, and which columns are
// masked or make up the record key. Names are matched as Debezium does: each expression must
// match the whole name, ignoring case.
type filter struct {
	dbInclude, dbExclude       []*regexp.Regexp
	tableInclude, tableExclude []*regexp.Regexp
	colInclude, colExclude     []*regexp.Regexp
	maskChars                  []maskChars
	maskHash                   []maskHash
	keyColumns                 []keyColumns
}

type maskChars struct {
	n   int
	res []*regexp.Regexp
}

type maskHash struct {
	newHash func() hash.Hash
	salt    string
	res     []*regexp.Regexp
}

func compileList(list []string) ([]*regexp.Regexp, error) {
	var out []*regexp.Regexp
	for _, p := range list {
		re, err := compileFull(p)
		if err != nil {
			return nil, err
		}
		out = append(out, re)
	}
	return out, nil
}

func newFilter(cfg connect.Config) (*filter, error) {
	f := &filter{}
	var err error
	for _, x := range []struct {
		key string
		dst *[]*regexp.Regexp
	}{
		{KeyDatabaseInclude, &f.dbInclude}, {KeyDatabaseExclude, &f.dbExclude},
		{KeyTableInclude, &f.tableInclude}, {KeyTableExclude, &f.tableExclude},
		{KeyColumnInclude, &f.colInclude}, {KeyColumnExclude, &f.colExclude},
	} {
		if *x.dst, err = compileList(cfg.List(x.key)); err != nil {
			return nil, connect.Permanentf("%s: %w", x.key, err)
		}
	}
	for k, v := range cfg.WithPrefix(KeyMaskWith) {
		n, err := parseMaskWith(k)
		if err != nil {
			return nil, connect.Permanentf("%s%s: %w", KeyMaskWith, k, err)
		}
		res, err := compileList(connect.SplitList(v))
		if err != nil {
			return nil, connect.Permanentf("%s%s: %w", KeyMaskWith, k, err)
		}
		f.maskChars = append(f.maskChars, maskChars{n: n, res: res})
	}
	for k, v := range cfg.WithPrefix(KeyMaskHash) {
		h, salt, err := parseMaskHash(k)
		if err != nil {
			return nil, connect.Permanentf("%s%s: %w", KeyMaskHash, k, err)
		}
		res, err := compileList(connect.SplitList(v))
		if err != nil {
			return nil, connect.Permanentf("%s%s: %w", KeyMaskHash, k, err)
		}
		f.maskHash = append(f.maskHash, maskHash{newHash: h, salt: salt, res: res})
	}
	if f.keyColumns, err = parseKeyColumns(cfg.String(KeyMessageKeyColumns)); err != nil {
		return nil, connect.Permanentf("%s: %w", KeyMessageKeyColumns, err)
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

// database reports whether tables of db may be captured.
func (f *filter) database(db string) bool {
	if systemDatabases[strings.ToLower(db)] {
		return false
	}
	if len(f.dbInclude) > 0 {
		return anyMatch(f.dbInclude, db)
	}
	return !anyMatch(f.dbExclude, db)
}

// table reports whether db.table is captured.
func (f *filter) table(db, table string) bool {
	if !f.database(db) {
		return false
	}
	name := db + "." + table
	if len(f.tableInclude) > 0 {
		return anyMatch(f.tableInclude, name)
	}
	return !anyMatch(f.tableExclude, name)
}

// column reports whether db.table.column appears in row images.
func (f *filter) column(db, table, column string) bool {
	name := db + "." + table + "." + column
	if len(f.colInclude) > 0 {
		return anyMatch(f.colInclude, name)
	}
	return !anyMatch(f.colExclude, name)
}

// masker returns the function that masks the values of db.table.column, or nil.
func (f *filter) masker(db, table, column string) func(any) any {
	name := db + "." + table + "." + column
	for _, m := range f.maskChars {
		if anyMatch(m.res, name) {
			stars := strings.Repeat("*", m.n)
			return func(v any) any {
				if _, ok := v.(string); ok {
					return stars
				}
				return v
			}
		}
	}
	for _, m := range f.maskHash {
		if anyMatch(m.res, name) {
			return func(v any) any {
				s, ok := v.(string)
				if !ok {
					return v
				}
				h := m.newHash()
				h.Write([]byte(m.salt))
				h.Write([]byte(s))
				return hex.EncodeToString(h.Sum(nil))
			}
		}
	}
	return nil
}

// keyOverride returns the message.key.columns for db.table, or nil.
func (f *filter) keyOverride(db, table string) []string {
	name := db + "." + table
	for _, k := range f.keyColumns {
		if k.table.MatchString(name) {
			return k.columns
		}
	}
	return nil
}
