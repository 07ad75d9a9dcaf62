package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"trainyard/internal/domain"
	"trainyard/internal/executor/local"
)

// Isolation modes (server config "isolation", docs/security.md).
const (
	isolationAuto     = "auto"     // isolate when the server runs as root
	isolationRequired = "required" // refuse to start unless jobs can be isolated
	isolationOff      = "off"      // jobs run as the server's user
)

// notIsolated is what the log and `trainyard status` say when jobs run as
// the server's own user.
const notIsolated = "jobs run as the server's user: not isolated"

// jobIsolation decides how jobs are isolated: nil when they run as the
// server's own user. The returned text describes the outcome for status.
func jobIsolation(cfg serverConfig, log *slog.Logger) (*local.Isolation, string, error) {
	mode := cfg.Isolation
	if mode == "" {
		mode = isolationAuto
	}
	root := os.Geteuid() == 0
	switch mode {
	case isolationOff:
		log.Warn(notIsolated + " (isolation: off); every job can read the server's data, keys and tokens")
		return nil, notIsolated, nil
	case isolationAuto, isolationRequired:
	default:
		return nil, "", fmt.Errorf("server config isolation: %q is not a mode; use auto (isolate when running as root), required or off", mode)
	}
	if !root {
		if mode == isolationRequired {
			return nil, "", errors.New("server config isolation: required, but the server does not run as root, so it cannot run jobs as other users; start it as root (e.g. from systemd), or set isolation: auto")
		}
		log.Warn(notIsolated + "; run the server as root to run each project's jobs as its own user (docs/security.md)")
		return nil, notIsolated, nil
	}
	iso := &local.Isolation{ProjectUsers: cfg.JobUsers.Projects, PoolUsers: cfg.JobUsers.Pools, StateFile: filepath.Join(cfg.Data, "job-uids.json")}
	if cfg.JobUIDs != "" {
		lo, hi, ok := strings.Cut(cfg.JobUIDs, "-")
		first, err1 := strconv.Atoi(strings.TrimSpace(lo))
		last, err2 := strconv.Atoi(strings.TrimSpace(hi))
		if !ok || err1 != nil || err2 != nil {
			return nil, "", fmt.Errorf("server config job_uids: %q is not a range; use FIRST-LAST, e.g. %d-%d", cfg.JobUIDs, local.DefaultFirstUID, local.DefaultLastUID)
		}
		iso.FirstUID, iso.LastUID = first, last
	}
	return iso, "jobs run as per-project users", nil
}

// protectDataDir closes the data directory to jobs' users: they may pass
// through it (to reach their own attempt and output directories) but not
// list it, and every file and directory in it other than the runs and
// artifacts trees (whose own entries are protected one by one) becomes
// the server's alone: the store, keys, tokens, code packages.
func protectDataDir(data string, open ...string) error {
	if err := os.Chmod(data, 0o711); err != nil {
		return fmt.Errorf("protect the data directory: %w", err)
	}
	ents, err := os.ReadDir(data)
	if err != nil {
		return fmt.Errorf("protect the data directory: %w", err)
	}
	for _, e := range ents {
		p := filepath.Join(data, e.Name())
		if e.Type()&fs.ModeSymlink != 0 {
			continue // chmod would follow it
		}
		mode := os.FileMode(0o600)
		switch {
		case contains(open, p):
			mode = 0o711
		case e.IsDir():
			mode = 0o700
		}
		if err := os.Chmod(p, mode); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("protect %s: %w", p, err)
		}
	}
	// Traversable roots outside the data directory (artifacts elsewhere).
	for _, p := range open {
		if err := os.MkdirAll(p, 0o711); err != nil {
			return fmt.Errorf("create %s: %w", p, err)
		}
		if err := os.Chmod(p, 0o711); err != nil {
			return fmt.Errorf("protect %s: %w", p, err)
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if filepath.Clean(v) == s {
			return true
		}
	}
	return false
}

// checkJobsReach refuses a data or artifacts directory that jobs, running as
// other users, could not reach: every directory above it must let any user
// pass (mode o+x), or every job fails at its first write with a permission
// error that says nothing of the cause.
func checkJobsReach(dirs ...string) error {
	for _, dir := range dirs {
		for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
			st, err := os.Stat(d)
			if err != nil {
				return fmt.Errorf("check that jobs can reach %s: %w", dir, err)
			}
			if st.Mode().Perm()&0o001 == 0 {
				return domain.Errorf(domain.ErrInvalid, "jobs run as per-project users and cannot reach %s: %s (mode %04o) lets only its owner pass; start with --data under a directory every user may pass (the default for root is /var/lib/trainyard), or chmod o+x %s",
					dir, d, st.Mode().Perm(), d)
			}
			if d == "/" || d == filepath.Dir(d) {
				break
			}
		}
	}
	return nil
}
