package local

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"trainyard/internal/executor"
)

// Environment checks once, not per attempt.
//
// An environment version is immutable (its digest names its definition),
// so a check that passed on this machine keeps passing as long as the
// software it looks at is unchanged. The executor remembers each pass
// under a key, the check's fingerprint (checkKey): the environment's
// digest, the node, the user the check runs as, the environment it runs in
// (the server's variables with the environment's; none of the job's), the
// machine's boot and OS release, the check's resolved program (path,
// device, inode, size, modification and change times) and every directory
// on the check's PATH (device, inode, modification and change times:
// installing, removing or replacing a program there changes them). An
// attempt whose fingerprint has a pass younger than Config.EnvCheckTTL
// skips the check; its log and Started event say so. A change the
// fingerprint cannot see (a library rewritten in place) is caught when the
// pass expires, and an attempt that fails after skipping the check makes
// the next one run it again.
//
// Only this executor records a pass: when the shim it started for an
// attempt whose check ran reports Started (on its event pipe, or through
// child.pid, which the shim writes only after the check passed). The
// check runs in CheckEnv in the root directory, so nothing the job
// controls (its working directory, env_vars, secrets) can make it pass;
// a failing check is never recorded. Config.EnvCheckCache keeps the passes
// across restarts in a file only the server writes.

// DefaultEnvCheckTTL is the server's default Config.EnvCheckTTL.
const DefaultEnvCheckTTL = time.Hour

// checkCacheVersion numbers the cache file's format and the key's recipe.
const checkCacheVersion = 1

// maxCheckPasses bounds the remembered passes: the oldest go first.
const maxCheckPasses = 1000

// checkPass is one remembered pass.
type checkPass struct {
	Key      string    `json:"key"`
	Env      string    `json:"env"` // "py3@1"
	Node     string    `json:"node"`
	PassedAt time.Time `json:"passed_at"`
}

// checkCache holds the passes; safe for concurrent use.
type checkCache struct {
	ttl  time.Duration
	file string // "": memory only
	now  func() time.Time

	mu     sync.Mutex
	passes map[string]checkPass
}

func newCheckCache(ttl time.Duration, file string, now func() time.Time) *checkCache {
	c := &checkCache{ttl: ttl, file: file, now: now, passes: map[string]checkPass{}}
	if ttl > 0 && file != "" {
		c.load()
	}
	return c
}

// cacheFile is the cache file's content.
type cacheFile struct {
	Version int         `json:"version"`
	Passes  []checkPass `json:"passes"`
}

// load reads the passes the file holds; a missing, unreadable or foreign
// file holds none (the checks then simply run).
func (c *checkCache) load() {
	f, err := os.Open(c.file)
	if err != nil {
		return
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4<<20))
	if err != nil {
		return
	}
	var cf cacheFile
	if json.Unmarshal(b, &cf) != nil || cf.Version != checkCacheVersion {
		return
	}
	now := c.now()
	for _, p := range cf.Passes {
		if p.Key != "" && c.freshAt(p, now) {
			c.passes[p.Key] = p
		}
	}
}

// freshAt reports whether p is still trusted at now: passed no longer
// than the TTL ago, and not in the future (a clock set back).
func (c *checkCache) freshAt(p checkPass, now time.Time) bool {
	return !now.Before(p.PassedAt) && now.Sub(p.PassedAt) < c.ttl
}

// fresh returns the pass of key when it is still trusted.
func (c *checkCache) fresh(key string) (checkPass, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.passes[key]
	if !ok || !c.freshAt(p, c.now()) {
		return checkPass{}, false
	}
	return p, true
}

// passed records a pass of key now, and saves the cache.
func (c *checkCache) passed(key, env, node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.passes[key] = checkPass{Key: key, Env: env, Node: node, PassedAt: now}
	c.save(now)
}

// forget drops the pass of key (an attempt that skipped the check failed),
// and saves the cache.
func (c *checkCache) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.passes[key]; !ok {
		return
	}
	delete(c.passes, key)
	c.save(c.now())
}

// save drops expired passes (and the oldest beyond maxCheckPasses) and
// writes the file, if there is one. c.mu is held. A failure to write only
// costs checks after a restart.
func (c *checkCache) save(now time.Time) {
	list := make([]checkPass, 0, len(c.passes))
	for k, p := range c.passes {
		if !c.freshAt(p, now) {
			delete(c.passes, k)
			continue
		}
		list = append(list, p)
	}
	if len(list) > maxCheckPasses {
		sortPasses(list)
		for _, p := range list[:len(list)-maxCheckPasses] {
			delete(c.passes, p.Key)
		}
		list = list[len(list)-maxCheckPasses:]
	}
	if c.file == "" {
		return
	}
	sortPasses(list)
	b, err := json.Marshal(cacheFile{Version: checkCacheVersion, Passes: list})
	if err == nil {
		_ = writeFileAtomic(c.file, append(b, '\n'), 0o600)
	}
}

// sortPasses orders passes oldest first, then by key.
func sortPasses(list []checkPass) {
	slices.SortFunc(list, func(a, b checkPass) int {
		return cmp.Or(a.PassedAt.Compare(b.PassedAt), strings.Compare(a.Key, b.Key))
	})
}

// note says that an attempt skips the check because of p.
func (c *checkCache) note(p checkPass) string {
	const layout = "2006-01-02 15:04:05 UTC"
	return fmt.Sprintf("environment check %s passed on node %s at %s; not run again until %s",
		p.Env, p.Node, p.PassedAt.UTC().Format(layout), p.PassedAt.Add(c.ttl).UTC().Format(layout))
}

// checkKey returns the fingerprint of l's check on this machine, run as
// uid and gid in env (CheckEnv as the shim gets it), or false when the
// check must run regardless: no remembering (no TTL, no CheckEnv or
// digest), or its program cannot be resolved or read (the shim reports
// that).
func checkKey(l executor.Launch, node string, uid, gid int) (string, bool) {
	if len(l.Check) == 0 || l.CheckEnv == nil || l.EnvDigest == "" {
		return "", false
	}
	h := sha256.New()
	field := func(s string) {
		h.Write([]byte(strconv.Itoa(len(s))))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	field(strconv.Itoa(checkCacheVersion))
	field(l.EnvDigest)
	field(node)
	field(strconv.Itoa(uid) + ":" + strconv.Itoa(gid))
	field(strconv.Itoa(len(l.Check)))
	for _, a := range l.Check {
		field(a)
	}
	field(strconv.Itoa(len(l.CheckEnv)))
	for _, kv := range l.CheckEnv {
		field(kv)
	}
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	field(string(boot))
	release, _ := os.ReadFile("/etc/os-release")
	field(string(release))
	path, err := resolve(l.Check[0], l.CheckEnv, checkDir)
	if err != nil {
		return "", false
	}
	if !filepath.IsAbs(path) {
		path = filepath.Join(checkDir, path)
	}
	prog, ok := statKey(path)
	if !ok {
		return "", false
	}
	field(path)
	field(prog)
	pathVar, _ := getenv(l.CheckEnv, "PATH")
	for _, dir := range filepath.SplitList(pathVar) {
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(checkDir, dir)
		}
		s, _ := statKey(dir) // a missing directory is "-": creating it changes the key
		field(dir)
		field(s)
	}
	return hex.EncodeToString(h.Sum(nil)), true
}

// statKey is what identifies a file's current content cheaply: device,
// inode, mode, size, modification and change time (following links);
// "-" and false when it cannot be read.
func statKey(path string) (string, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return "-", false
	}
	return fmt.Sprintf("%d %d %o %d %d.%d %d.%d", st.Dev, st.Ino, st.Mode, st.Size,
		st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec), true
}

// checkDir is the directory the check runs in when the launch gives a
// CheckEnv: one no job can write to.
const checkDir = "/"

// planCheck decides how a's environment check runs. A launch with a
// CheckEnv gets the check run in it (with what the executor adds to every
// attempt's environment) in checkDir; one whose fingerprint has a pass
// younger than the TTL skips the check instead, and its log and Started
// event say why. Without a CheckEnv the check runs in Env and WorkDir,
// every time.
func (e *Executor) planCheck(a *attempt, l executor.Launch, rec *launchRecord, port int, userName string) {
	if len(l.Check) == 0 || l.CheckEnv == nil {
		return
	}
	cl := l
	cl.Env = l.CheckEnv
	rec.CheckEnv = withDefaults(launchEnv(cl, port), l.Dir, userName)
	rec.CheckDir = checkDir
	if e.checks.ttl <= 0 {
		return
	}
	uid, gid := os.Getuid(), os.Getgid()
	if rec.UID != 0 {
		uid, gid = rec.UID, rec.GID
	}
	node := nodeName(l)
	key, ok := checkKey(l, node, uid, gid)
	if !ok {
		return
	}
	a.checkEnv, a.checkNode = cmp.Or(l.EnvRef, "of the environment"), node
	if p, ok := e.checks.fresh(key); ok {
		rec.Check, rec.CheckEnv, rec.CheckDir = nil, nil, ""
		rec.CheckNote = e.checks.note(p)
		a.skipKey, a.checkNote = key, rec.CheckNote
		return
	}
	a.checkKey = key
}

// checkPassed remembers the pass of a's check, when it ran and is to be
// remembered: a's user process started, so the check passed.
func (e *Executor) checkPassed(a *attempt) {
	if a.checkKey != "" {
		e.checks.passed(a.checkKey, a.checkEnv, a.checkNode)
	}
}

// nodeName is the node l runs on: its placement's first, or this machine.
func nodeName(l executor.Launch) string {
	if len(l.Placement.Nodes) > 0 && l.Placement.Nodes[0].Name != "" {
		return l.Placement.Nodes[0].Name
	}
	host, _ := os.Hostname()
	return host
}
