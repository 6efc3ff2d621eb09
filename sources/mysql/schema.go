package mysql

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/japanese"
	"golang.org/x/text/encoding/korean"
	"golang.org/x/text/encoding/simplifiedchinese"
	"golang.org/x/text/encoding/traditionalchinese"
	"golang.org/x/text/encoding/unicode"
	"golang.org/x/text/encoding/unicode/utf32"

	"github.com/sluice-cdc/sluice/connect"
)

// table is a captured table as one path (snapshot or binlog) sees it.
type table struct {
	db, name string
	cols     []column
	key      []int // columns of the record key (message.key.columns, else the primary key)
	order    []int // primary key columns, in key order, for chunked snapshot reads
	topic    string
	signal   bool // the signal table: its inserts are signals, not records

	// derived by finishTable, for building records
	nOut      int  // columns in row images (not excluded)
	keyPrefix bool // the key is the first len(key) fields of a row image, which records share
	dbBox     any  // db, boxed once
	nameBox   any  // name, boxed once
}

func (t *table) id() string { return t.db + "." + t.name }

// charsetEncoding maps a MySQL character set to the decoder of its bytes (nil: UTF-8 or ASCII).
func charsetEncoding(cs string) encoding.Encoding {
	switch strings.ToLower(cs) {
	case "latin1":
		return charmap.Windows1252
	case "latin2":
		return charmap.ISO8859_2
	case "latin5":
		return charmap.ISO8859_9
	case "latin7":
		return charmap.ISO8859_13
	case "cp1250":
		return charmap.Windows1250
	case "cp1251":
		return charmap.Windows1251
	case "cp1256":
		return charmap.Windows1256
	case "cp1257":
		return charmap.Windows1257
	case "cp850":
		return charmap.CodePage850
	case "cp852":
		return charmap.CodePage852
	case "cp866":
		return charmap.CodePage866
	case "koi8r":
		return charmap.KOI8R
	case "koi8u":
		return charmap.KOI8U
	case "greek":
		return charmap.ISO8859_7
	case "hebrew":
		return charmap.ISO8859_8
	case "macroman":
		return charmap.Macintosh
	case "swe7", "dec8", "hp8", "armscii8", "keybcs2", "macce", "geostd8", "tis620":
		return nil // rare; decoded as UTF-8 with replacement characters
	case "ucs2", "utf16":
		return unicode.UTF16(unicode.BigEndian, unicode.IgnoreBOM)
	case "utf16le":
		return unicode.UTF16(unicode.LittleEndian, unicode.IgnoreBOM)
	case "utf32":
		return utf32.UTF32(utf32.BigEndian, utf32.IgnoreBOM)
	case "gbk", "gb2312":
		return simplifiedchinese.GBK
	case "gb18030":
		return simplifiedchinese.GB18030
	case "big5":
		return traditionalchinese.Big5
	case "sjis", "cp932":
		return japanese.ShiftJIS
	case "ujis", "eucjpms":
		return japanese.EUCJP
	case "euckr":
		return korean.EUCKR
	}
	return nil
}

// collations maps collation ids to character sets, as the server lists them.
type collations map[uint64]string

func loadCollations(c *client.Conn) (collations, error) {
	r, err := c.Execute("SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATIONS")
	if err != nil {
		return nil, fmt.Errorf("read collations: %w", err)
	}
	out := collations{}
	for i := range r.Values {
		id, _ := r.GetUint(i, 0)
		cs, _ := r.GetString(i, 1)
		out[id] = cs
	}
	return out, nil
}

const binaryCollation = 63

// tableMeta is what the binlog reader derives from one TABLE_MAP event.
type tableMeta struct {
	raw []byte // the event body, to recognise an unchanged definition
	tbl *table
}

// tableFromMap builds a table from a TABLE_MAP event with binlog_row_metadata=FULL: column
// names, signedness, character sets, ENUM/SET members and the primary key all come from the
// event itself, so every row event is decoded with the definition valid at its position.
func (s *Source) tableFromMap(tm *replication.TableMapEvent) (*table, error) {
	db, name := string(tm.Schema), string(tm.Table)
	n := int(tm.ColumnCount)
	names := tm.ColumnNameString()
	if len(names) != n {
		return nil, connect.Permanentf("table map of %s.%s has no column names: the server must log binlog_row_metadata=FULL (run SET GLOBAL binlog_row_metadata = 'FULL')", db, name)
	}
	unsigned := tm.UnsignedMap()
	colls := tm.CollationMap()
	enums := tm.EnumStrValueMap()
	sets := tm.SetStrValueMap()
	t := &table{db: db, name: name, cols: make([]column, n)}
	for i := 0; i < n; i++ {
		c := &t.cols[i]
		c.name = names[i]
		_, c.nullable = tm.Nullable(i)
		typ, meta := tm.ColumnType[i], tm.ColumnMeta[i]
		text := func() {
			coll, ok := colls[i]
			if ok && coll == binaryCollation {
				c.kind = kindBinary
				return
			}
			c.kind = kindText
			if ok {
				c.charset = s.collations[coll]
				if e := charsetEncoding(c.charset); e != nil {
					c.dec = e.NewDecoder()
				}
			}
		}
		switch typ {
		case gomysql.MYSQL_TYPE_TINY, gomysql.MYSQL_TYPE_SHORT, gomysql.MYSQL_TYPE_INT24, gomysql.MYSQL_TYPE_LONG:
			c.kind = kindInt
		case gomysql.MYSQL_TYPE_LONGLONG:
			c.kind = kindInt
			if unsigned[i] {
				c.kind = kindUint64
			}
		case gomysql.MYSQL_TYPE_NEWDECIMAL, gomysql.MYSQL_TYPE_DECIMAL:
			c.kind = kindDecimal
		case gomysql.MYSQL_TYPE_FLOAT:
			c.kind = kindFloat
		case gomysql.MYSQL_TYPE_DOUBLE:
			c.kind = kindDouble
		case gomysql.MYSQL_TYPE_BIT:
			c.kind = kindBit
			c.bits = int(meta>>8)*8 + int(meta&0xff)
		case gomysql.MYSQL_TYPE_DATE, gomysql.MYSQL_TYPE_NEWDATE:
			c.kind = kindDate
		case gomysql.MYSQL_TYPE_TIME, gomysql.MYSQL_TYPE_TIME2:
			c.kind = kindTime
			if typ == gomysql.MYSQL_TYPE_TIME2 {
				c.fsp = int(meta)
			}
		case gomysql.MYSQL_TYPE_DATETIME, gomysql.MYSQL_TYPE_DATETIME2:
			c.kind = kindDateTime
			if typ == gomysql.MYSQL_TYPE_DATETIME2 {
				c.fsp = int(meta)
			}
		case gomysql.MYSQL_TYPE_TIMESTAMP, gomysql.MYSQL_TYPE_TIMESTAMP2:
			c.kind = kindTimestamp
			if typ == gomysql.MYSQL_TYPE_TIMESTAMP2 {
				c.fsp = int(meta)
			}
		case gomysql.MYSQL_TYPE_YEAR:
			c.kind = kindYear
		case gomysql.MYSQL_TYPE_ENUM:
			c.kind, c.values = kindEnum, enums[i]
		case gomysql.MYSQL_TYPE_SET:
			c.kind, c.values = kindSet, sets[i]
		case gomysql.MYSQL_TYPE_STRING:
			switch real := byte(meta >> 8); real {
			case gomysql.MYSQL_TYPE_ENUM:
				c.kind, c.values = kindEnum, enums[i]
			case gomysql.MYSQL_TYPE_SET:
				c.kind, c.values = kindSet, sets[i]
			default:
				text()
				if c.kind == kindBinary {
					c.padTo = stringLength(meta)
				}
			}
		case gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_VAR_STRING, gomysql.MYSQL_TYPE_BLOB,
			gomysql.MYSQL_TYPE_TINY_BLOB, gomysql.MYSQL_TYPE_MEDIUM_BLOB, gomysql.MYSQL_TYPE_LONG_BLOB:
			text()
		case gomysql.MYSQL_TYPE_JSON:
			c.kind = kindJSON
		case gomysql.MYSQL_TYPE_GEOMETRY:
			c.kind = kindGeometry
		default:
			return nil, connect.Permanentf("table %s.%s column %s: unsupported binlog column type %d", db, name, c.name, typ)
		}
	}
	pk := make([]int, 0, len(tm.PrimaryKey))
	for _, k := range tm.PrimaryKey {
		pk = append(pk, int(k))
	}
	s.finishTable(t, pk)
	t.signal = s.isSignalTable(db, name)
	return t, nil
}

// stringLength is the byte length of a CHAR/BINARY column from its table map metadata.
func stringLength(meta uint16) int {
	if meta >= 256 {
		b0, b1 := uint8(meta>>8), uint8(meta&0xff)
		if b0&0x30 != 0x30 {
			return int(uint16(b1) | uint16((b0&0x30)^0x30)<<4)
		}
		return int(meta & 0xff)
	}
	return int(meta)
}

// finishTable applies the configuration (column filter, masks, key override, topic).
func (s *Source) finishTable(t *table, pk []int) {
	f := s.cfg.filter
	t.nOut = 0
	for i := range t.cols {
		c := &t.cols[i]
		c.excluded = !f.column(t.db, t.name, c.name)
		c.mask = f.masker(t.db, t.name, c.name)
		c.out = -1
		if !c.excluded {
			c.out = t.nOut
			t.nOut++
		}
	}
	t.dbBox, t.nameBox = t.db, nilIfEmpty(t.name)
	t.order = pk
	t.key = pk
	if cols := f.keyOverride(t.db, t.name); cols != nil {
		t.key = nil
		for _, name := range cols {
			for i := range t.cols {
				if strings.EqualFold(t.cols[i].name, name) {
					t.key = append(t.key, i)
				}
			}
		}
	}
	t.topic = s.cfg.prefix + "." + t.db + "." + t.name
	// a key made of the first columns of the images, unmasked, is a prefix of the image
	t.keyPrefix = len(t.key) > 0
	for j, i := range t.key {
		if c := &t.cols[i]; c.out != j || c.mask != nil {
			t.keyPrefix = false
		}
	}
}

// sameMeta reports whether a table map event body equals the cached one.
func (m *tableMeta) same(raw []byte) bool { return m != nil && bytes.Equal(m.raw, raw) }

// infoColumn is one row of information_schema.COLUMNS.
type infoColumn struct {
	name, dataType, columnType, charset string
	nullable                            bool
	numPrecision, dtPrecision, octetLen int64
	key                                 string
}

// readTable reads a table's definition from information_schema (used by the snapshot, and for
// the table definitions in schema change events).
func (s *Source) readTable(c *client.Conn, db, name string) (*table, []infoColumn, error) {
	r, err := c.Execute(`SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, IFNULL(CHARACTER_SET_NAME, ''),
		IFNULL(NUMERIC_PRECISION, 0), IFNULL(DATETIME_PRECISION, 0), IFNULL(CHARACTER_OCTET_LENGTH, 0), COLUMN_KEY
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, db, name)
	if err != nil {
		return nil, nil, fmt.Errorf("read columns of %s.%s: %w", db, name, err)
	}
	if len(r.Values) == 0 {
		return nil, nil, nil
	}
	t := &table{db: db, name: name}
	var infos []infoColumn
	for i := range r.Values {
		var ic infoColumn
		ic.name, _ = r.GetString(i, 0)
		ic.dataType, _ = r.GetString(i, 1)
		ic.columnType, _ = r.GetString(i, 2)
		nullable, _ := r.GetString(i, 3)
		ic.nullable = nullable == "YES"
		ic.charset, _ = r.GetString(i, 4)
		ic.numPrecision, _ = r.GetInt(i, 5)
		ic.dtPrecision, _ = r.GetInt(i, 6)
		ic.octetLen, _ = r.GetInt(i, 7)
		ic.key, _ = r.GetString(i, 8)
		infos = append(infos, ic)
		col, err := columnFromInfo(ic)
		if err != nil {
			return nil, nil, fmt.Errorf("table %s.%s: %w", db, name, err)
		}
		t.cols = append(t.cols, col)
	}
	pk, err := primaryKey(c, db, name, t)
	if err != nil {
		return nil, nil, err
	}
	s.finishTable(t, pk)
	return t, infos, nil
}

// primaryKey returns the primary key columns in key order, or the first unique index whose
// columns are all NOT NULL (the server's implicit primary key), or nil.
func primaryKey(c *client.Conn, db, name string, t *table) ([]int, error) {
	r, err := c.Execute(`SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0
		ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX`, db, name)
	if err != nil {
		return nil, fmt.Errorf("read primary key of %s.%s: %w", db, name, err)
	}
	var cur string
	var cols []int
	usable := true
	for i := range r.Values {
		idx, _ := r.GetString(i, 0)
		col, _ := r.GetString(i, 1)
		if idx != cur {
			if cur != "" && usable && len(cols) > 0 {
				return cols, nil
			}
			cur, cols, usable = idx, nil, true
		}
		j := -1
		for k := range t.cols {
			if t.cols[k].name == col {
				j = k
			}
		}
		if j < 0 || t.cols[j].nullable {
			usable = false
			continue
		}
		cols = append(cols, j)
	}
	if cur != "" && usable && len(cols) > 0 {
		return cols, nil
	}
	return nil, nil
}

// columnFromInfo maps an information_schema column to a column.
func columnFromInfo(ic infoColumn) (column, error) {
	c := column{name: ic.name, nullable: ic.nullable, typeName: strings.ToUpper(ic.columnType), charset: ic.charset}
	unsigned := strings.Contains(strings.ToLower(ic.columnType), "unsigned")
	switch strings.ToLower(ic.dataType) {
	case "tinyint", "smallint", "mediumint", "int", "integer":
		c.kind = kindInt
	case "bigint":
		c.kind = kindInt
		if unsigned {
			c.kind = kindUint64
		}
	case "decimal", "numeric":
		c.kind = kindDecimal
	case "float":
		c.kind = kindFloat
	case "double", "real", "double precision":
		c.kind = kindDouble
	case "bit":
		c.kind, c.bits = kindBit, int(ic.numPrecision)
	case "date":
		c.kind = kindDate
	case "time":
		c.kind, c.fsp = kindTime, int(ic.dtPrecision)
	case "datetime":
		c.kind, c.fsp = kindDateTime, int(ic.dtPrecision)
	case "timestamp":
		c.kind, c.fsp = kindTimestamp, int(ic.dtPrecision)
	case "year":
		c.kind = kindYear
	case "char", "varchar", "tinytext", "text", "mediumtext", "longtext":
		c.kind = kindText
		if strings.EqualFold(ic.charset, "binary") {
			c.kind = kindBinary
		}
	case "binary":
		c.kind, c.padTo = kindBinary, int(ic.octetLen)
	case "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
		c.kind = kindBinary
	case "enum", "set":
		c.kind = kindEnum
		if strings.EqualFold(ic.dataType, "set") {
			c.kind = kindSet
		}
		vals, err := parseEnumValues(ic.columnType)
		if err != nil {
			return c, fmt.Errorf("column %s: %w", ic.name, err)
		}
		c.values = vals
	case "json":
		c.kind = kindJSON
	case "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon", "geometrycollection", "geomcollection":
		c.kind = kindGeometry
	default:
		return c, connect.Permanentf("column %s: unsupported type %s", ic.name, ic.columnType)
	}
	return c, nil
}

// parseEnumValues parses "enum('a','b”c')" into its members.
func parseEnumValues(columnType string) ([]string, error) {
	open := strings.IndexByte(columnType, '(')
	if open < 0 || !strings.HasSuffix(columnType, ")") {
		return nil, fmt.Errorf("malformed type %q", columnType)
	}
	body := columnType[open+1 : len(columnType)-1]
	var out []string
	for i := 0; i < len(body); {
		if body[i] != '\'' {
			i++
			continue
		}
		var b strings.Builder
		i++
		for i < len(body) {
			if body[i] == '\'' {
				if i+1 < len(body) && body[i+1] == '\'' {
					b.WriteByte('\'')
					i += 2
					continue
				}
				i++
				break
			}
			if body[i] == '\\' && i+1 < len(body) {
				i++
			}
			b.WriteByte(body[i])
			i++
		}
		out = append(out, b.String())
	}
	return out, nil
}

// quoteName quotes an identifier with backticks.
func quoteName(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// quoteString quotes a string literal.
func quoteString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\x00", `\0`)
	return "'" + r.Replace(s) + "'"
}

var _ = strconv.Itoa
