package mysql

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/sluice-cdc/sluice/connect"
)

// preflight checks that the server can feed the source, and fails with a Permanent error that
// names the fix:
//
//   - the binlog is on (log_bin), in ROW format, with FULL row images and FULL row metadata
//   - the user holds the grants the snapshot and the binlog reader need
//   - database.server.id is neither the server's own id nor that of a connected replica
func (s *Source) preflight(ctx context.Context, c *client.Conn) error {
	s.version = c.GetServerVersion()
	s.flavor = s.cfg.flavor
	if s.flavor == "" {
		s.flavor = gomysql.MySQLFlavor
		if strings.Contains(strings.ToLower(s.version), "mariadb") {
			s.flavor = gomysql.MariaDBFlavor
		}
	}
	vars, err := globalVariables(c, "log_bin", "binlog_format", "binlog_row_image", "binlog_row_metadata", "server_id")
	if err != nil {
		return err
	}
	var problems []string
	if !strings.EqualFold(vars["log_bin"], "ON") && vars["log_bin"] != "1" {
		problems = append(problems, "the binlog is off (log_bin=OFF): start the server with --log-bin (and --server-id)")
	}
	if v := vars["binlog_format"]; !strings.EqualFold(v, "ROW") {
		problems = append(problems, fmt.Sprintf("binlog_format is %s, not ROW: run SET GLOBAL binlog_format = 'ROW' (and set it in the server's configuration)", orUnset(v)))
	}
	if v := vars["binlog_row_image"]; !strings.EqualFold(v, "FULL") {
		problems = append(problems, fmt.Sprintf("binlog_row_image is %s, not FULL: run SET GLOBAL binlog_row_image = 'FULL' (and set it in the server's configuration)", orUnset(v)))
	}
	if v := vars["binlog_row_metadata"]; !strings.EqualFold(v, "FULL") {
		problems = append(problems, fmt.Sprintf("binlog_row_metadata is %s, not FULL: run SET GLOBAL binlog_row_metadata = 'FULL' (MySQL >= 8.0.1, MariaDB >= 10.5; and set it in the server's configuration)", orUnset(v)))
	}
	if len(problems) > 0 {
		return connect.Permanentf("mysql server %s:%d cannot be captured: %s", s.cfg.host, s.cfg.port, strings.Join(problems, "; "))
	}
	if err := s.checkGrants(c); err != nil {
		return err
	}
	return s.checkServerID(c, vars["server_id"])
}

func orUnset(v string) string {
	if v == "" {
		return "unset"
	}
	return v
}

func globalVariables(c *client.Conn, names ...string) (map[string]string, error) {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = quoteString(n)
	}
	r, err := c.Execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN (" + strings.Join(quoted, ",") + ")")
	if err != nil {
		return nil, fmt.Errorf("read server variables: %w", err)
	}
	out := map[string]string{}
	for i := range r.Values {
		k, _ := r.GetString(i, 0)
		v, _ := r.GetString(i, 1)
		out[strings.ToLower(k)] = v
	}
	return out, nil
}

var grantRe = regexp.MustCompile(`(?i)^GRANT (.+?) ON (\S+) TO `)

// checkGrants reads SHOW GRANTS and names each missing privilege with the GRANT to run.
func (s *Source) checkGrants(c *client.Conn) error {
	r, err := c.Execute("SHOW GRANTS FOR CURRENT_USER()")
	if err != nil {
		return fmt.Errorf("read grants: %w", err)
	}
	global := map[string]bool{}
	anySelect := false
	for i := range r.Values {
		line, _ := r.GetString(i, 0)
		m := grantRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		on := strings.ReplaceAll(m[2], "`", "")
		for _, p := range strings.Split(m[1], ",") {
			p = strings.ToUpper(strings.TrimSpace(p))
			if on == "*.*" {
				global[p] = true
			}
			if p == "SELECT" || p == "ALL PRIVILEGES" || p == "ALL" {
				anySelect = true
			}
		}
	}
	if global["ALL PRIVILEGES"] || global["ALL"] {
		return nil
	}
	has := func(names ...string) bool {
		for _, n := range names {
			if global[n] {
				return true
			}
		}
		return false
	}
	var missing []string
	if !has("REPLICATION SLAVE", "REPLICATION REPLICA") {
		missing = append(missing, "REPLICATION SLAVE")
	}
	if !has("REPLICATION CLIENT", "BINLOG MONITOR", "SUPER") {
		if s.flavor == gomysql.MariaDBFlavor {
			missing = append(missing, "BINLOG MONITOR")
		} else {
			missing = append(missing, "REPLICATION CLIENT")
		}
	}
	if !has("SELECT") && !anySelect {
		missing = append(missing, "SELECT")
	}
	if s.cfg.lockingMinimal && s.cfg.snapshotMode != SnapshotNever && s.cfg.snapshotMode != SnapshotNoData && !has("RELOAD") {
		missing = append(missing, "RELOAD")
	}
	if len(missing) == 0 {
		return nil
	}
	fix := fmt.Sprintf("GRANT %s ON *.* TO %s", strings.Join(missing, ", "), userHost(c, s.cfg.user))
	what := "privilege " + missing[0]
	if len(missing) > 1 {
		what = "privileges " + strings.Join(missing, ", ")
	}
	note := ""
	for _, m := range missing {
		if m == "RELOAD" {
			note = " (RELOAD is for the snapshot's brief global read lock; snapshot.locking.mode=none does without it)"
		}
	}
	return connect.Permanentf("user %s lacks the %s%s: run %s", s.cfg.user, what, note, fix)
}

// userHost returns 'user'@'host' as the server knows the current user.
func userHost(c *client.Conn, user string) string {
	r, err := c.Execute("SELECT CURRENT_USER()")
	if err == nil && len(r.Values) > 0 {
		cu, _ := r.GetString(0, 0)
		if u, h, ok := strings.Cut(cu, "@"); ok {
			return quoteString(u) + "@" + quoteString(h)
		}
	}
	return quoteString(user) + "@'%'"
}

// checkServerID fails when database.server.id is the server's own or a connected replica's.
func (s *Source) checkServerID(c *client.Conn, own string) error {
	id := strconv.FormatUint(uint64(s.cfg.serverID), 10)
	if own == id {
		return connect.Permanentf("database.server.id %s is the server's own server_id: choose another, unique id", id)
	}
	q := "SHOW SLAVE HOSTS"
	if s.flavor == gomysql.MySQLFlavor {
		q = "SHOW REPLICAS"
	}
	r, err := c.Execute(q)
	if err != nil {
		// the statement needs privileges a CDC user may lack; the clash is then caught when
		// the binlog reader connects (see serverIDClash)
		s.log.Debug("server id check skipped", "err", err)
		return nil
	}
	for i := range r.Values {
		sid, _ := r.GetString(i, 0)
		if sid == id {
			host, _ := r.GetString(i, 1)
			return connect.Permanentf("database.server.id %s is already used by a connected replica (%s): choose another, unique id", id, host)
		}
	}
	return nil
}

// serverIDClash recognises the error the server sends to a binlog reader whose server id is
// taken by another reader.
func serverIDClash(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "4052") || strings.Contains(msg, "same server_uuid/server_id") || strings.Contains(msg, "same server_id") ||
		strings.Contains(msg, "1236") && strings.Contains(msg, "server_id")
}

type binlogFile struct {
	name string
	size int64
}

// binlogFiles lists the binlog files on the server, oldest first.
func (s *Source) binlogFiles(c *client.Conn) ([]binlogFile, error) {
	r, err := c.Execute("SHOW BINARY LOGS")
	if err != nil {
		return nil, fmt.Errorf("list binary logs: %w", err)
	}
	var out []binlogFile
	for i := range r.Values {
		name, _ := r.GetString(i, 0)
		size, _ := r.GetInt(i, 1)
		out = append(out, binlogFile{name: name, size: size})
	}
	return out, nil
}

func hasFile(files []binlogFile, name string) bool {
	for _, f := range files {
		if f.name == name {
			return true
		}
	}
	return false
}

// binlogHead returns the current binlog file and position: SHOW BINARY LOG STATUS on MySQL
// >= 8.2 (where SHOW MASTER STATUS is gone), SHOW MASTER STATUS elsewhere.
func (s *Source) binlogHead(c *client.Conn) (string, uint32, error) {
	q := "SHOW MASTER STATUS"
	if s.flavor == gomysql.MySQLFlavor {
		if n, err := c.CompareServerVersion("8.2.0"); err == nil && n >= 0 {
			q = "SHOW BINARY LOG STATUS"
		}
	}
	r, err := c.Execute(q)
	if err != nil {
		return "", 0, fmt.Errorf("read binlog position (%s): %w", q, err)
	}
	if len(r.Values) == 0 {
		return "", 0, connect.Permanentf("%s returned nothing: the binlog is off", q)
	}
	file, _ := r.GetString(0, 0)
	pos, _ := r.GetUint(0, 1)
	return file, uint32(pos), nil
}
