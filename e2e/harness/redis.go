package harness

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

const redisInstall = "apt-get install -y redis-server"

// RedisOptions configures StartRedis. The zero value is a server without persistence.
type RedisOptions struct {
	// ExtraArgs are appended to the redis-server command line ("--maxmemory", "1mb", ...).
	ExtraArgs []string
	// StartTimeout bounds each start (default 60 s).
	StartTimeout time.Duration
}

// Redis is a private redis-server on loopback without persistence (no RDB, no AOF): a restart
// starts empty.
type Redis struct {
	*Server

	Host string // 127.0.0.1
	Port int
}

// StartRedis starts redis-server on a free loopback port and returns once it answers PING.
// The caller must Close it.
//
// redis-server is found through SLUICE_REDIS_SERVER, else PATH, /usr/bin and /usr/sbin.
func StartRedis(ctx context.Context, opts RedisOptions) (*Redis, error) {
	bin, err := findProgram("redis-server", "SLUICE_REDIS_SERVER", []string{"/usr/bin", "/usr/sbin"}, redisInstall)
	if err != nil {
		return nil, fmt.Errorf("start redis: %w", err)
	}
	dir, err := makeDir("redis")
	if err != nil {
		return nil, fmt.Errorf("start redis: %w", err)
	}
	r := &Redis{Server: newServer("redis", dir), Host: "127.0.0.1"}
	if opts.StartTimeout > 0 {
		r.startTimeout = opts.StartTimeout
	}
	r.closeGrace = 0 // nothing to keep
	r.poll = 10 * time.Millisecond
	if r.Port, err = pickPort(); err != nil {
		return nil, fmt.Errorf("start redis: %w", errJoinClose(err, r.Server))
	}
	r.repick = func() (err error) { r.Port, err = pickPort(); return err }
	r.launch = func() ([]string, *proc, error) {
		argv := append([]string{bin, "--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1",
			"--protected-mode", "yes", "--save", "", "--appendonly", "no", "--dir", dir,
			"--daemonize", "no", "--logfile", ""}, opts.ExtraArgs...)
		p, err := spawn(argv, dir, baseEnv(), nil, r.logPath, syscall.SIGTERM)
		return argv, p, err
	}
	r.ready = r.ping
	if err := startOrClean(ctx, r.Server); err != nil {
		return nil, err
	}
	return r, nil
}

// NewRedis is StartRedis for one test: it fails t when the server does not start and closes
// the server in t.Cleanup.
func NewRedis(t testing.TB, opts RedisOptions) *Redis {
	t.Helper()
	r, err := StartRedis(context.Background(), opts)
	return mustStart(t, r, err)
}

// Addr is host:port of the server, as go-redis wants it.
func (r *Redis) Addr() string { return fmt.Sprintf("%s:%d", r.Host, r.Port) }

// ping sends an inline PING and expects +PONG.
func (r *Redis) ping(ctx context.Context) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", r.Addr())
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}
