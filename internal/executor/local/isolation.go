package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"trainyard/internal/executor"
)

// Isolation runs every project's attempts as that project's own
// unprivileged Unix user: its uid and gid (equal), no supplementary groups,
// no way to gain privileges (PR_SET_NO_NEW_PRIVS), a umask that keeps its
// files from other projects, its own HOME and a private /tmp. It needs the
// server to run as root.
type Isolation struct {
	// FirstUID and LastUID bound the ids given to projects, in the order
	// they first run a job; ids an existing user of this machine holds are
	// skipped. Zero: DefaultFirstUID to DefaultLastUID.
	FirstUID, LastUID int
	// ProjectUsers and PoolUsers name an existing user of this machine
	// (by name or uid) to run a project's jobs, or the jobs in a pool, as
	// instead of an allocated id; a project's user wins over its pool's.
	ProjectUsers map[string]string
	PoolUsers    map[string]string
	// StateFile records which id each project was given, so that a project
	// keeps its id (and its files stay its own) across restarts. Required.
	StateFile string
}

// The default range of project ids: high enough to be clear of the ids
// distributions hand out to people and services (and of most subordinate
// id ranges), low enough for tools that treat ids as signed 32-bit.
const (
	DefaultFirstUID = 900_000
	DefaultLastUID  = 999_999
)

// jobUmask keeps an isolated job's files from every other user: other
// projects run as other users and other groups.
const jobUmask = 0o027

// Users is this machine's user database: package userdb's System, which
// asks the C library (NSS) when built with cgo. The executor takes it from
// its caller so that package local, which the attempt supervisor links,
// links neither os/user nor the C library.
type Users interface {
	// Lookup finds a user by name, or by id when name is numeric.
	Lookup(name string) (uid, gid int, username string, err error)
	// IDInUse reports whether a user or a group of this machine has id n.
	IDInUse(n int) bool
	// Current returns the name of the user the server runs as.
	Current() (string, error)
}

// identity is the Unix user an attempt runs as.
type identity struct {
	UID, GID int
	Name     string // USER and LOGNAME
}

// users gives each project its identity.
type users struct {
	cfg      Isolation
	db       Users
	projects map[string]identity // from cfg.ProjectUsers
	pools    map[string]identity // from cfg.PoolUsers

	mu    sync.Mutex
	given map[string]int // project → allocated id, as in the state file
}

// newUsers resolves the configured users in db and loads the state file.
func newUsers(cfg Isolation, db Users) (*users, error) {
	if cfg.StateFile == "" {
		return nil, errors.New("isolation: StateFile is empty; name a file for the ids given to projects")
	}
	if cfg.FirstUID == 0 && cfg.LastUID == 0 {
		cfg.FirstUID, cfg.LastUID = DefaultFirstUID, DefaultLastUID
	}
	if cfg.FirstUID < 1000 || cfg.LastUID < cfg.FirstUID || cfg.LastUID >= 1<<31-1 {
		return nil, fmt.Errorf("isolation: the id range %d-%d is not usable; give a range such as %d-%d, above the ids of this machine's own users", cfg.FirstUID, cfg.LastUID, DefaultFirstUID, DefaultLastUID)
	}
	u := &users{cfg: cfg, db: db, projects: map[string]identity{}, pools: map[string]identity{}, given: map[string]int{}}
	for _, set := range []struct {
		kind  string
		names map[string]string
		ids   map[string]identity
	}{{"project", cfg.ProjectUsers, u.projects}, {"pool", cfg.PoolUsers, u.pools}} {
		for key, name := range set.names {
			id, err := lookupUser(db, name)
			if err != nil {
				return nil, fmt.Errorf("isolation: the user for %s %s: %w", set.kind, key, err)
			}
			if id.UID == 0 || id.GID == 0 {
				return nil, fmt.Errorf("isolation: %s %s would run as %s, which is root or in group root; name an unprivileged user", set.kind, key, name)
			}
			set.ids[key] = id
		}
	}
	b, err := os.ReadFile(cfg.StateFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("isolation: read the project ids: %w", err)
	default:
		if err := json.Unmarshal(b, &u.given); err != nil {
			return nil, fmt.Errorf("isolation: the project ids in %s are unreadable (%v); restore the file from a backup, or remove it to give every project a new id (their old files then belong to nobody)", cfg.StateFile, err)
		}
	}
	return u, nil
}

func lookupUser(db Users, name string) (identity, error) {
	uid, gid, username, err := db.Lookup(name)
	if err != nil {
		return identity{}, fmt.Errorf("%w; create the user (useradd) or name another", err)
	}
	return identity{UID: uid, GID: gid, Name: username}, nil
}

// forProject returns the identity of a job of project in pool: a
// configured user, else the project's own id, allocated (and recorded) the
// first time.
func (u *users) forProject(project, pool string) (identity, error) {
	if id, ok := u.projects[project]; ok {
		return id, nil
	}
	if id, ok := u.pools[pool]; ok {
		return id, nil
	}
	name := "trainyard-" + project
	u.mu.Lock()
	defer u.mu.Unlock()
	if n, ok := u.given[project]; ok {
		return identity{UID: n, GID: n, Name: name}, nil
	}
	taken := make(map[int]bool, len(u.given))
	for _, n := range u.given {
		taken[n] = true
	}
	for n := u.cfg.FirstUID; n <= u.cfg.LastUID; n++ {
		if taken[n] || u.db.IDInUse(n) {
			continue
		}
		next := make(map[string]int, len(u.given)+1)
		for k, v := range u.given {
			next[k] = v
		}
		next[project] = n
		b, _ := json.MarshalIndent(next, "", "  ")
		if err := writeFileAtomic(u.cfg.StateFile, append(b, '\n'), 0o600); err != nil {
			return identity{}, fmt.Errorf("record the id of project %s: %w", project, err)
		}
		u.given = next
		return identity{UID: n, GID: n, Name: name}, nil
	}
	return identity{}, fmt.Errorf("no free id left in %d-%d for project %s; widen the server's isolation id range", u.cfg.FirstUID, u.cfg.LastUID, project)
}

// Subdirectories of an attempt's directory that belong to the attempt's
// user: its HOME and its temporary files (mounted on /tmp and /var/tmp in
// the attempt's own mount namespace when the executor isolates jobs).
const (
	homeDir = "home"
	tmpDir  = "tmp"
)

// traversable is the mode of the directories above an isolated attempt's
// own: its user may pass through them but not list them.
const traversable = 0o711

// prepareDirs creates the attempt's directory (traversable), its HOME and
// tmp, and gives the attempt's user its HOME, tmp, a working directory
// inside the attempt's directory and the writable directories. With id nil
// (no isolation) it only creates HOME and tmp.
//
// Everything it changes was created by the server for this attempt, or is
// the job's own output directory, whose contents are never followed: the
// working directory's tree (an unpacked code package no job has run in
// yet) is handed over with lchown, which does not follow symlinks.
func prepareDirs(dir, workDir string, writable []string, id *identity) error {
	// Traversable, not listable: another project's job may not read the
	// names of this project's jobs.
	for _, d := range writable {
		if err := makeDir(d, traversable); err != nil {
			return fmt.Errorf("%w: %w", executor.ErrOutputs, err)
		}
	}
	if id == nil {
		for _, d := range []string{filepath.Join(dir, homeDir), filepath.Join(dir, tmpDir), workDir} {
			if err := makeDir(d, 0o755); err != nil {
				return fmt.Errorf("create directory: %w", err)
			}
		}
		return nil
	}
	if err := makeDir(dir, traversable); err != nil {
		return fmt.Errorf("create directory: %w", err)
	}
	// The attempt's directory and the job's directory above it may exist
	// with another mode: make them traversable only.
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, traversable); err != nil {
			return fmt.Errorf("protect %s: %w", d, err)
		}
	}
	own := []string{filepath.Join(dir, homeDir), filepath.Join(dir, tmpDir)}
	if within(dir, workDir) {
		if _, err := os.Lstat(workDir); err == nil {
			if err := chownTree(workDir, *id); err != nil {
				return err
			}
		} else {
			own = append(own, workDir)
		}
	}
	for _, d := range own {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create directory: %w", err)
		}
	}
	for _, d := range slices.Concat(own, writable) {
		if err := giveDir(d, *id); err != nil {
			return err
		}
	}
	return nil
}

// makeDir creates the directory d (mode perm, less the umask) and its
// missing parents unless it exists: what os.MkdirAll does, in one mkdir(2)
// where the parent exists, as it mostly does (os.MkdirAll first stats d,
// then each parent up to one that exists). Like os.MkdirAll, it takes an
// existing directory, or a link to one, as made: whoever hands the
// directory to a job opens it without following links (giveDir).
func makeDir(d string, perm fs.FileMode) error {
	err := os.Mkdir(d, perm)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(d), perm); err != nil {
			return err
		}
		err = os.Mkdir(d, perm)
	}
	if errors.Is(err, fs.ErrExist) {
		if st, serr := os.Stat(d); serr == nil && st.IsDir() {
			return nil
		}
	}
	return err
}

// giveDir makes the directory d (never a symlink) the user's own, mode 0700.
func giveDir(d string, id identity) error {
	f, err := os.OpenFile(d, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("give %s to the job's user: %w", d, err)
	}
	defer f.Close()
	if err := f.Chown(id.UID, id.GID); err != nil {
		return fmt.Errorf("give %s to the job's user: %w", d, err)
	}
	if err := f.Chmod(0o700); err != nil {
		return fmt.Errorf("give %s to the job's user: %w", d, err)
	}
	return nil
}

// chownTree gives every entry of the tree at root to the user, without
// following symlinks; root itself becomes mode 0700.
func chownTree(root string, id identity) error {
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, id.UID, id.GID)
	})
	if err == nil {
		err = os.Chmod(root, 0o700)
	}
	if err != nil {
		return fmt.Errorf("give the working directory %s to the job's user: %w", root, err)
	}
	return nil
}

// within reports whether p lies strictly inside dir.
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != "." && rel != ".." && !filepath.IsAbs(rel) && !startsWithDotDot(rel)
}

func startsWithDotDot(rel string) bool {
	return len(rel) >= 3 && rel[:3] == ".."+string(filepath.Separator)
}

// withDefaults returns env with the variables every attempt gets unless it
// sets them itself: HOME and TMPDIR in the attempt's directory, and USER and
// LOGNAME of the user it runs as.
func withDefaults(env []string, dir, userName string) []string {
	out := slices.Clone(env)
	for _, kv := range [][2]string{{"HOME", filepath.Join(dir, homeDir)}, {"TMPDIR", filepath.Join(dir, tmpDir)},
		{"USER", userName}, {"LOGNAME", userName}} {
		if _, ok := getenv(out, kv[0]); !ok && kv[1] != "" {
			out = append(out, kv[0]+"="+kv[1])
		}
	}
	return out
}

// sharedTmp are the directories a private /tmp covers.
var sharedTmp = []string{"/tmp", "/var/tmp"}

// underSharedTmp reports whether a path lies in /tmp or /var/tmp: an
// attempt whose directories do cannot have a private /tmp, which would hide
// them (a data directory there is for tests and trials).
func underSharedTmp(paths []string) bool {
	for _, p := range paths {
		for _, t := range sharedTmp {
			if p == t || within(t, p) {
				return true
			}
		}
	}
	return false
}

// privateTmp mounts the attempt's tmp directory on /tmp and /var/tmp, and a
// fresh tmpfs on /dev/shm, in the shim's own mount namespace (the executor
// starts isolated shims in one), so that the job's processes, which inherit
// it, share temporary files with no other job.
func privateTmp(tmp string) error {
	for _, target := range sharedTmp {
		if _, err := os.Stat(target); err != nil {
			continue
		}
		if err := unix.Mount(tmp, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("mount %s on %s: %w", tmp, target, err)
		}
	}
	if _, err := os.Stat("/dev/shm"); err == nil {
		if err := unix.Mount("tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
			return fmt.Errorf("mount a private /dev/shm: %w", err)
		}
	}
	return nil
}

// dropPrivileges prepares the shim's thread, from which the job's
// processes are forked, for an isolated job: no process of the job can gain
// privileges through exec (set-user-id files, file capabilities), and files
// it creates are closed to other users. The shim itself, which stays root,
// writes only files no job can reach. It must run on the locked thread.
func dropPrivileges() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	syscall.Umask(jobUmask)
	return nil
}

// credential is the job's identity for os.StartProcess; nil runs the job
// as the shim's own user.
func (r *launchRecord) credential() *syscall.Credential {
	if r.UID == 0 {
		return nil
	}
	return &syscall.Credential{Uid: uint32(r.UID), Gid: uint32(r.GID), Groups: []uint32{}}
}

// enterable returns nil when the user uid/gid (with no supplementary
// groups) may pass through every directory from / to dir, else an error
// naming the first one that stops it. It reads mode bits only: access
// control lists and security modules may still refuse.
func enterable(dir string, uid, gid int) error {
	dir = filepath.Clean(dir)
	var path []string
	for d := dir; ; d = filepath.Dir(d) {
		path = append(path, d)
		if d == "/" || d == "." {
			break
		}
	}
	for i := len(path) - 1; i >= 0; i-- {
		d := path[i]
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok {
			continue
		}
		perm := st.Mode().Perm()
		var bit os.FileMode = 0o001
		switch {
		case int(sys.Uid) == uid:
			bit = 0o100
		case int(sys.Gid) == gid:
			bit = 0o010
		}
		if perm&bit == 0 {
			return fmt.Errorf("%s (mode %04o, owner uid %d) does not let it in", d, perm, sys.Uid)
		}
	}
	return nil
}
