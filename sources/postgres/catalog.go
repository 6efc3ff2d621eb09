package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluice-cdc/sluice/connect"
)

// dsn is the keyword/value connection string of the settings.
func (s *settings) dsn(replication bool) string {
	var b strings.Builder
	kv := func(k, v string) {
		if v == "" {
			return
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteString("='")
		b.WriteString(strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v))
		b.WriteByte('\'')
	}
	kv("host", s.host)
	kv("port", strconv.Itoa(s.port))
	kv("user", s.user)
	kv("password", s.password)
	kv("dbname", s.dbname)
	kv("sslmode", s.sslMode)
	kv("sslrootcert", s.sslRootCert)
	kv("sslcert", s.sslCert)
	kv("sslkey", s.sslKey)
	kv("connect_timeout", strconv.Itoa(max(1, int(s.connectTimeout.Seconds()))))
	if replication {
		kv("replication", "database")
	}
	return b.String()
}

// connect opens a regular connection.
func (s *settings) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(s.dsn(false))
	if err != nil {
		return nil, connect.Permanent(fmt.Errorf("connection settings: %w", err))
	}
	for k, v := range sessionParams {
		cfg.RuntimeParams[k] = v
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, classifyConnectError(s, err)
	}
	return c, nil
}

// connectReplication opens a replication connection (replication=database).
func (s *settings) connectReplication(ctx context.Context) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(s.dsn(true))
	if err != nil {
		return nil, connect.Permanent(fmt.Errorf("connection settings: %w", err))
	}
	for k, v := range sessionParams {
		cfg.RuntimeParams[k] = v
	}
	for k, v := range s.replParams {
		cfg.RuntimeParams[k] = v
	}
	c, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, classifyConnectError(s, err)
	}
	return c, nil
}

// pgCode returns the SQLSTATE of a server error, or "".
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// classifyConnectError marks authentication and authorization faults permanent and says how
// to fix them; anything else (refused, timed out, server starting) is retriable.
func classifyConnectError(s *settings, err error) error {
	switch pgCode(err) {
	case "28P01", "28000":
		if strings.Contains(err.Error(), "replication") {
			return connect.Permanent(fmt.Errorf("connect to %s:%d as %s: %w; the role needs the REPLICATION attribute "+
				"(ALTER ROLE %s WITH REPLICATION;) and pg_hba.conf must allow it replication connections", s.host, s.port, s.user, err, quoteIdent(s.user)))
		}
		return connect.Permanent(fmt.Errorf("connect to %s:%d as %s: %w (check %s and %s)", s.host, s.port, s.user, err, KeyUser, KeyPassword))
	case "3D000":
		return connect.Permanent(fmt.Errorf("connect to %s:%d: %w (check %s)", s.host, s.port, err, KeyDBName))
	case "42501":
		return connect.Permanent(fmt.Errorf("connect to %s:%d as %s: %w", s.host, s.port, s.user, err))
	}
	return fmt.Errorf("connect to %s:%d: %w", s.host, s.port, err)
}

// tableRef is a table of the database.
type tableRef struct {
	OID       uint32
	Schema    string
	Name      string
	ReplIdent byte // relreplident: d default, n nothing, f full, i index
	HasPK     bool
}

func (t tableRef) String() string { return t.Schema + "." + t.Name }

// listTables returns the ordinary tables (and partitions) of the database outside the system
// schemas, sorted by schema and name.
func listTables(ctx context.Context, c *pgx.Conn) ([]tableRef, error) {
	rows, err := c.Query(ctx, `
SELECT c.oid, n.nspname, c.relname, c.relreplident::text,
       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind = 'r'
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%' AND n.nspname NOT LIKE 'pg\_temp%'
ORDER BY n.nspname, c.relname`)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	var out []tableRef
	for rows.Next() {
		var t tableRef
		var ident string
		if err := rows.Scan(&t.OID, &t.Schema, &t.Name, &ident, &t.HasPK); err != nil {
			return nil, fmt.Errorf("list tables: %w", err)
		}
		if ident != "" {
			t.ReplIdent = ident[0]
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Schema != out[j].Schema {
			return out[i].Schema < out[j].Schema
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// capturedTables returns the tables the filter selects.
func capturedTables(ctx context.Context, c *pgx.Conn, f *filter) ([]tableRef, error) {
	all, err := listTables(ctx, c)
	if err != nil {
		return nil, err
	}
	var out []tableRef
	for _, t := range all {
		if f.table(t.Schema, t.Name) {
			out = append(out, t)
		}
	}
	return out, nil
}

// colDef is a column as pgoutput describes it: name, type and modifier.
type colDef struct {
	Name   string
	Type   uint32
	Typmod int32
}

// tableColumns returns the columns pgoutput sends for a table: the live, non-generated
// columns in attnum order, limited to the publication's column list when it has one.
func tableColumns(ctx context.Context, c *pgx.Conn, relid uint32, publication string) ([]colDef, error) {
	rows, err := c.Query(ctx, `
SELECT a.attname, a.atttypid, a.atttypmod
FROM pg_attribute a
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
  AND (NOT EXISTS (SELECT 1 FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
                   WHERE p.pubname = $2 AND pr.prrelid = a.attrelid AND pr.prattrs IS NOT NULL)
       OR EXISTS (SELECT 1 FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
                  WHERE p.pubname = $2 AND pr.prrelid = a.attrelid AND a.attnum = ANY (pr.prattrs::int2[])))
ORDER BY a.attnum`, relid, publication)
	if err != nil {
		return nil, fmt.Errorf("columns of table %d: %w", relid, err)
	}
	defer rows.Close()
	var out []colDef
	for rows.Next() {
		var d colDef
		if err := rows.Scan(&d.Name, &d.Type, &d.Typmod); err != nil {
			return nil, fmt.Errorf("columns of table %d: %w", relid, err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("columns of table %d: %w", relid, err)
	}
	return out, nil
}

// keyColumns returns the names of a table's primary key columns in key order, or, without a
// primary key, those of its replica identity index; nil if it has neither.
func keyColumns(ctx context.Context, c *pgx.Conn, relid uint32) ([]string, error) {
	rows, err := c.Query(ctx, `
SELECT a.attname
FROM (SELECT i.indkey::int2[] AS k FROM pg_index i
      WHERE i.indrelid = $1 AND (i.indisprimary OR i.indisreplident)
      ORDER BY i.indisprimary DESC LIMIT 1) ix,
     LATERAL unnest(ix.k) WITH ORDINALITY AS u(attnum, ord)
     JOIN pg_attribute a ON a.attrelid = $1 AND a.attnum = u.attnum
ORDER BY u.ord`, relid)
	if err != nil {
		return nil, fmt.Errorf("key of table %d: %w", relid, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("key of table %d: %w", relid, err)
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// lookupType reads a type's pg_type row.
func lookupType(ctx context.Context, c *pgx.Conn, oid uint32) (pgTypeInfo, error) {
	var t pgTypeInfo
	var typ, cat, delim string
	err := c.QueryRow(ctx, `
SELECT t.oid, t.typname, n.nspname, t.typtype::text, t.typbasetype, t.typtypmod, t.typelem, t.typcategory::text, t.typdelim::text
FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.oid = $1`, oid).
		Scan(&t.OID, &t.Name, &t.Schema, &typ, &t.Base, &t.BaseMod, &t.Elem, &cat, &delim)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("%w: oid %d", errNoType, oid)
	}
	if err != nil {
		return t, err
	}
	t.Type, t.Category, t.Delim = firstByte(typ), firstByte(cat), firstByte(delim)
	return t, nil
}

func firstByte(s string) byte {
	if s == "" {
		return 0
	}
	return s[0]
}
