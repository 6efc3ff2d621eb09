package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// dirPrefix starts the name of every temp dir the harness makes under os.TempDir(), so that
// leftovers of a killed test binary are easy to find (and removeStale finds them).
const dirPrefix = "sluice-harness-"

// ownerFile holds "<pid> <start time>" of the process that made the dir.
const ownerFile = "owner"

// setupHint is appended to every "not installed" error.
const setupHint = "run `make setup` (bash e2e/setup/setup.sh)"

// NotInstalledError reports that a server's program or files are missing. Its message names
// what is missing and the command that installs it.
type NotInstalledError struct {
	What    string // e.g. "mariadbd not found in PATH, /usr/sbin, /usr/bin"
	Install string // e.g. "apt-get install -y mariadb-server mariadb-client"
}

func (e *NotInstalledError) Error() string {
	return fmt.Sprintf("%s: %s (%s)", e.What, setupHint, e.Install)
}

// findProgram returns the path of a program: the file named by env when that is set, else the
// first of PATH and dirs that holds it.
func findProgram(name, env string, dirs []string, install string) (string, error) {
	if p := os.Getenv(env); p != "" {
		if isExecutable(p) {
			return p, nil
		}
		return "", &NotInstalledError{What: fmt.Sprintf("%s not found at %s (from %s)", name, p, env), Install: install}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range dirs {
		if p := filepath.Join(d, name); isExecutable(p) {
			return p, nil
		}
	}
	return "", &NotInstalledError{
		What:    fmt.Sprintf("%s not found in PATH or %s (set %s to override)", name, strings.Join(dirs, ", "), env),
		Install: install,
	}
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// cacheDir is where e2e/setup/setup.sh puts the Maven-fetched servers.
func cacheDir() string {
	if d := os.Getenv("SLUICE_CACHE"); d != "" {
		return d
	}
	return "/var/cache/sluice"
}

// makeDir creates a fresh state dir for one server and records this process as its owner.
func makeDir(kind string) (string, error) {
	removeStaleOnce.Do(func() { removeStale(os.TempDir()) })
	dir, err := os.MkdirTemp(os.TempDir(), fmt.Sprintf("%s%s-%d-", dirPrefix, kind, os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("create state dir: %w", err)
	}
	// servers that run as another OS user must be able to traverse it
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", errors.Join(fmt.Errorf("chmod state dir: %w", err), os.RemoveAll(dir))
	}
	st, err := procStartTime(os.Getpid())
	if err != nil {
		return "", errors.Join(err, os.RemoveAll(dir))
	}
	owner := fmt.Sprintf("%d %s\n", os.Getpid(), st)
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner), 0o644); err != nil {
		return "", errors.Join(fmt.Errorf("write owner file: %w", err), os.RemoveAll(dir))
	}
	return dir, nil
}

// procStartTime returns field 22 of /proc/<pid>/stat (start time in clock ticks since boot),
// which tells a live owner from a later process that reuses its pid.
func procStartTime(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", fmt.Errorf("read process start time: %w", err)
	}
	// the command name (field 2) may hold spaces and parentheses: parse after the last ')'
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", fmt.Errorf("read process start time: malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return "", fmt.Errorf("read process start time: short /proc/%d/stat", pid)
	}
	return f[19], nil
}

var removeStaleOnce sync.Once

// removeStale removes the harness dirs under root whose owner process is gone, after killing
// every process still running in one (its cwd or command line names the dir). Such dirs are
// left when a test binary is killed with SIGKILL and its cleanups never run.
func removeStale(root string) {
	dirs, _ := filepath.Glob(filepath.Join(root, dirPrefix+"*"))
	var stale []string
	for _, d := range dirs {
		if ownerAlive(d) {
			continue
		}
		stale = append(stale, d)
	}
	if len(stale) == 0 {
		return
	}
	for _, d := range stale {
		pids := processesIn(d)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		// PostgreSQL's segment can go only once no process is attached to it
		deadline := time.Now().Add(5 * time.Second)
		for anyAlive(pids) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		removeSysVShm(d)
		_ = os.RemoveAll(d)
	}
}

func ownerAlive(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		// not yet written: a harness is creating the dir right now
		fi, serr := os.Stat(dir)
		return serr == nil && time.Since(fi.ModTime()) < time.Minute
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil {
		return false
	}
	st, err := procStartTime(pid)
	return err == nil && st == f[1] && alive(pid)
}

// processesIn lists the processes whose working dir is inside dir or whose command line
// mentions dir.
func processesIn(dir string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err == nil &&
			(cwd == dir || strings.HasPrefix(cwd, dir+"/")) {
			pids = append(pids, pid)
			continue
		}
		if cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && bytes.Contains(cl, []byte(dir)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// pickPort returns a loopback TCP port that was free a moment ago. It draws below the kernel's
// ephemeral range (32768+) so that outgoing connections do not take it before the server binds;
// callers retry with another port when the server reports the address in use.
func pickPort() (int, error) {
	if f := firstPick; f != nil {
		return f()
	}
	for range 200 {
		p := 20000 + rand.IntN(12000)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		_ = l.Close()
		return p, nil
	}
	return 0, errors.New("pick port: no free loopback port in 20000-31999")
}

// firstPick, when set by a test, replaces the next pick (to hand out a taken port).
var firstPick func() (int, error)

// pickPorts returns n distinct free ports.
func pickPorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for len(ports) < n {
		p, err := pickPort()
		if err != nil {
			return nil, err
		}
		dup := false
		for _, q := range ports {
			dup = dup || q == p
		}
		if !dup {
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// proc is one running server process (the leader of its own process group).
type proc struct {
	cmd    *exec.Cmd
	done   chan struct{} // closed when the process has exited and been reaped
	err    error         // Wait's result, valid after done
	logf   *os.File
	stopSg syscall.Signal // graceful stop signal for the group
}

// spawn starts argv as the leader of a new process group, with stdout and stderr appended to
// logPath. The child gets SIGKILL when the test process dies (Pdeathsig), so a killed test
// binary leaves no server running; grandchildren exit with their parent (PostgreSQL's
// backends, Elasticsearch's server JVM whose stdin is the launcher's pipe), and removeStale
// catches the rest. (Pdeathsig fires when the forking OS thread exits; the Go runtime keeps
// its threads unless a goroutine exits while locked to one, which tests do not do.)
func spawn(argv []string, dir string, env []string, cred *syscall.Credential, logPath string, stopSig syscall.Signal) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: cred,
	}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), logf: logf, stopSg: stopSig}
	go func() {
		p.err = cmd.Wait()
		_ = logf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signalGroup sends sig to the process group (every process the server started that did not
// leave the group).
func (p *proc) signalGroup(sig syscall.Signal) {
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
}

// stop sends the graceful signal, waits up to grace, then kills the group. It returns once the
// leader has exited; remaining group members get SIGKILL in any case, and so do descendants
// that left the group, taken before the signal: once the leader has exited they are no longer
// its descendants.
func (p *proc) stop(grace time.Duration) {
	var family []member
	if !p.exited() {
		family = members(descendants(p.cmd.Process.Pid))
		p.signalGroup(p.stopSg)
		select {
		case <-p.done:
		case <-time.After(grace):
		}
	}
	p.kill()
	for _, m := range family {
		if m.same() {
			_ = syscall.Kill(m.pid, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && anySame(family) {
		time.Sleep(10 * time.Millisecond)
	}
}

// member is a process and its start time, which tells it from a later process that reuses its
// pid.
type member struct {
	pid   int
	start string
}

func members(pids []int) []member {
	var out []member
	for _, pid := range pids {
		if st, err := procStartTime(pid); err == nil {
			out = append(out, member{pid, st})
		}
	}
	return out
}

// same reports whether the process is still the one recorded and not a zombie.
func (m member) same() bool {
	st, err := procStartTime(m.pid)
	return err == nil && st == m.start && alive(m.pid)
}

func anySame(ms []member) bool {
	for _, m := range ms {
		if m.same() {
			return true
		}
	}
	return false
}

// kill sends SIGKILL to the group and to every descendant of the leader (PostgreSQL's children
// leave the group with setsid), waits for the leader to be reaped and for the others to be gone,
// so that a restart on the same ports and files does not race with them.
func (p *proc) kill() {
	pgid := p.cmd.Process.Pid
	var desc []int
	if !p.exited() {
		desc = descendants(pgid)
	}
	p.signalGroup(syscall.SIGKILL)
	for _, pid := range desc {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	<-p.done
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && (groupAlive(pgid) || anyAlive(desc)) {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		time.Sleep(10 * time.Millisecond)
	}
}

// descendants lists the children, grandchildren, ... of pid.
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp := parentPID(c); pp > 0 {
			children[pp] = append(children[pp], c)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		q := queue[0]
		queue = queue[1:]
		for _, c := range children[q] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// parentPID is field 4 of /proc/<pid>/stat, 0 when unknown.
func parentPID(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	pp, _ := strconv.Atoi(f[1])
	return pp
}

// alive tells whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || !bytes.HasPrefix(b[i+1:], []byte(" Z"))
}

func anyAlive(pids []int) bool {
	for _, pid := range pids {
		if alive(pid) {
			return true
		}
	}
	return false
}

func groupAlive(pgid int) bool {
	return syscall.Kill(-pgid, 0) == nil
}

// logTail returns the last n lines of a log file, for error messages.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	b = bytes.TrimRight(b, "\n")
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// addrInUse tells whether a server's log, from byte offset on, says it could not bind its port.
func addrInUse(logPath string, offset int64) bool {
	b, _ := os.ReadFile(logPath)
	if offset > int64(len(b)) {
		offset = 0
	}
	return bytes.Contains(bytes.ToLower(b[offset:]), []byte("address already in use"))
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// waitReady polls ready until it returns nil, the process exits, or ctx ends.
func waitReady(ctx context.Context, p *proc, every time.Duration, ready func(context.Context) error) error {
	var last error
	for {
		if p.exited() {
			return fmt.Errorf("exited before answering (%v)", p.err)
		}
		// a check that hangs (a port someone else listens on) ends when the process exits
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		go func() {
			select {
			case <-p.done:
				cancel()
			case <-actx.Done():
			}
		}()
		last = ready(actx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not answering in time (%w): last check: %w", ctx.Err(), last)
		case <-p.done:
		case <-time.After(every):
		}
	}
}

// runQuiet runs a short setup command (initdb, storage format) with its output in logPath.
func runQuiet(ctx context.Context, argv []string, dir string, env []string, cred *syscall.Credential, logPath string) error {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w; last lines of %s:\n%s", strings.Join(argv, " "), err, logPath, logTail(logPath, 30))
	}
	return nil
}
