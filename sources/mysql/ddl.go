package mysql

import (
	"strings"
)

// DDL statements of the binlog are classified, not fully parsed: the source needs to know which
// tables a statement creates, alters, renames, truncates or drops. Row events carry their own
// table definitions (binlog_row_metadata=FULL); the definitions that schema change events
// report are read from information_schema when the DDL is processed.

// ddlKind is what a DDL statement does.
type ddlKind int

const (
	ddlOther ddlKind = iota
	ddlCreateTable
	ddlAlterTable
	ddlDropTable
	ddlRenameTable
	ddlTruncate
	ddlCreateDatabase
	ddlDropDatabase
	ddlAlterDatabase
)

type tableName struct{ db, table string }

// ddlStmt is a classified DDL statement. For ddlRenameTable (and ALTER TABLE ... RENAME TO),
// renames holds (old, new) pairs.
type ddlStmt struct {
	kind     ddlKind
	tables   []tableName
	renames  [][2]tableName
	database string // for database statements
}

type ddlLexer struct {
	s   string
	pos int
}

// next returns the next token: an identifier (unquoted), a keyword (upper-cased), a
// punctuation character, or "" at the end. quoted tells a `quoted` identifier.
func (l *ddlLexer) next() (tok string, quoted bool) {
	for l.pos < len(l.s) {
		c := l.s[l.pos]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			l.pos++
		case c == '#' || c == '-' && strings.HasPrefix(l.s[l.pos:], "-- "):
			if i := strings.IndexByte(l.s[l.pos:], '\n'); i >= 0 {
				l.pos += i + 1
			} else {
				l.pos = len(l.s)
			}
		case strings.HasPrefix(l.s[l.pos:], "/*"):
			if strings.HasPrefix(l.s[l.pos:], "/*!") || strings.HasPrefix(l.s[l.pos:], "/*M!") {
				// executable comment: its content counts; skip the marker and version digits
				l.pos += 3
				if l.s[l.pos-1] == '!' && l.pos < len(l.s) && l.s[l.pos-2] == 'M' {
					l.pos++
				}
				for l.pos < len(l.s) && l.s[l.pos] >= '0' && l.s[l.pos] <= '9' {
					l.pos++
				}
				continue
			}
			if i := strings.Index(l.s[l.pos+2:], "*/"); i >= 0 {
				l.pos += i + 4
			} else {
				l.pos = len(l.s)
			}
		case strings.HasPrefix(l.s[l.pos:], "*/"):
			l.pos += 2
		default:
			return l.token()
		}
	}
	return "", false
}

func (l *ddlLexer) token() (string, bool) {
	c := l.s[l.pos]
	switch {
	case c == '`' || c == '"':
		var b strings.Builder
		l.pos++
		for l.pos < len(l.s) {
			if l.s[l.pos] == c {
				if l.pos+1 < len(l.s) && l.s[l.pos+1] == c {
					b.WriteByte(c)
					l.pos += 2
					continue
				}
				l.pos++
				break
			}
			b.WriteByte(l.s[l.pos])
			l.pos++
		}
		return b.String(), true
	case c == '\'':
		l.pos++
		for l.pos < len(l.s) {
			if l.s[l.pos] == '\\' {
				l.pos += 2
				continue
			}
			if l.s[l.pos] == '\'' {
				l.pos++
				break
			}
			l.pos++
		}
		return "'", false
	case isIdentByte(c):
		start := l.pos
		for l.pos < len(l.s) && isIdentByte(l.s[l.pos]) {
			l.pos++
		}
		return l.s[start:l.pos], false
	default:
		l.pos++
		return string(c), false
	}
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// tokens splits a statement into tokens; quoted identifiers are marked by a leading "\x00".
func ddlTokens(q string) []string {
	l := &ddlLexer{s: q}
	var out []string
	for {
		t, quoted := l.next()
		if t == "" && !quoted {
			return out
		}
		if quoted {
			t = "\x00" + t
		}
		out = append(out, t)
	}
}

func isKeyword(tok, kw string) bool {
	return !strings.HasPrefix(tok, "\x00") && strings.EqualFold(tok, kw)
}

func identOf(tok string) string { return strings.TrimPrefix(tok, "\x00") }

// parseDDL classifies a statement executed with defaultDB as the current database.
func parseDDL(q, defaultDB string) ddlStmt {
	t := ddlTokens(q)
	i := 0
	kw := func(words ...string) bool {
		for _, w := range words {
			if i < len(t) && isKeyword(t[i], w) {
				i++
				return true
			}
		}
		return false
	}
	name := func() (tableName, bool) {
		if i >= len(t) || t[i] == "," || t[i] == "(" || t[i] == ";" {
			return tableName{}, false
		}
		first := identOf(t[i])
		i++
		if i+1 < len(t) && t[i] == "." {
			i += 2
			return tableName{db: first, table: identOf(t[i-1])}, true
		}
		return tableName{db: defaultDB, table: first}, true
	}
	ifExists := func() {
		save := i
		if kw("IF") {
			kw("NOT")
			if !kw("EXISTS") {
				i = save
			}
		}
	}
	var st ddlStmt
	switch {
	case kw("CREATE"):
		if kw("OR") {
			kw("REPLACE")
		}
		kw("TEMPORARY")
		switch {
		case kw("TABLE"):
			ifExists()
			if n, ok := name(); ok {
				st.kind, st.tables = ddlCreateTable, []tableName{n}
			}
		case kw("DATABASE", "SCHEMA"):
			ifExists()
			if i < len(t) {
				st.kind, st.database = ddlCreateDatabase, identOf(t[i])
			}
		default:
			// CREATE [UNIQUE|FULLTEXT|SPATIAL] INDEX ... ON t
			for i < len(t) && !isKeyword(t[i], "INDEX") && !isKeyword(t[i], "VIEW") && !isKeyword(t[i], "TRIGGER") &&
				!isKeyword(t[i], "PROCEDURE") && !isKeyword(t[i], "FUNCTION") && !isKeyword(t[i], "EVENT") && i < 8 {
				i++
			}
			if kw("INDEX") {
				for i < len(t) && !isKeyword(t[i], "ON") {
					i++
				}
				if kw("ON") {
					if n, ok := name(); ok {
						st.kind, st.tables = ddlAlterTable, []tableName{n}
					}
				}
			}
		}
	case kw("ALTER"):
		kw("ONLINE")
		kw("IGNORE")
		switch {
		case kw("TABLE"):
			ifExists()
			n, ok := name()
			if !ok {
				break
			}
			st.kind, st.tables = ddlAlterTable, []tableName{n}
			// ALTER TABLE t ..., RENAME [TO|AS] t2
			depth := 0
			for ; i < len(t); i++ {
				switch t[i] {
				case "(":
					depth++
				case ")":
					depth--
				}
				if depth == 0 && isKeyword(t[i], "RENAME") && i+1 < len(t) &&
					!isKeyword(t[i+1], "COLUMN") && !isKeyword(t[i+1], "INDEX") && !isKeyword(t[i+1], "KEY") && !isKeyword(t[i+1], "CONSTRAINT") {
					i++
					kw("TO", "AS")
					if to, ok := name(); ok {
						st.renames = append(st.renames, [2]tableName{n, to})
					}
					break
				}
			}
		case kw("DATABASE", "SCHEMA"):
			st.kind = ddlAlterDatabase
			if i < len(t) {
				st.database = identOf(t[i])
			}
		}
	case kw("DROP"):
		kw("TEMPORARY")
		switch {
		case kw("TABLE", "TABLES"):
			ifExists()
			st.kind = ddlDropTable
			for {
				n, ok := name()
				if !ok {
					break
				}
				st.tables = append(st.tables, n)
				if i < len(t) && t[i] == "," {
					i++
					continue
				}
				break
			}
		case kw("DATABASE", "SCHEMA"):
			ifExists()
			if i < len(t) {
				st.kind, st.database = ddlDropDatabase, identOf(t[i])
			}
		case kw("INDEX"):
			for i < len(t) && !isKeyword(t[i], "ON") {
				i++
			}
			if kw("ON") {
				if n, ok := name(); ok {
					st.kind, st.tables = ddlAlterTable, []tableName{n}
				}
			}
		}
	case kw("RENAME"):
		if kw("TABLE", "TABLES") {
			st.kind = ddlRenameTable
			for {
				from, ok := name()
				if !ok || !kw("TO") {
					break
				}
				to, ok := name()
				if !ok {
					break
				}
				st.renames = append(st.renames, [2]tableName{from, to})
				if i < len(t) && t[i] == "," {
					i++
					continue
				}
				break
			}
		}
	case kw("TRUNCATE"):
		kw("TABLE")
		if n, ok := name(); ok {
			st.kind, st.tables = ddlTruncate, []tableName{n}
		}
	}
	return st
}
