package service

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"trainyard/internal/domain"
	"trainyard/internal/jobspec"
)

// DataRoots are the directories jobs may name as inputs (inputs[].path),
// from the server config's data_roots: Default for every job, plus
// Projects[p] for the jobs of project p and Pools[q] for the jobs in pool
// q. With none, jobs may name no inputs at all.
type DataRoots struct {
	Default  []string            `yaml:"default"`
	Projects map[string][]string `yaml:"projects"`
	Pools    map[string][]string `yaml:"pools"`
}

// InputRoots is DataRoots checked and resolved at start (see
// DataRoots.Resolve). The zero value allows no inputs.
type InputRoots struct {
	def      []dataRoot
	projects map[string][]dataRoot
	pools    map[string][]dataRoot
	data     string // the server's data directory, resolved: never an input
}

// dataRoot is one allowed directory: as configured (cleaned) and with its
// symbolic links resolved.
type dataRoot struct{ path, real string }

// Resolve checks the roots (absolute paths; none the data directory
// dataDir or inside it) and resolves their symbolic links, once: a link
// changed later does not widen what jobs may name. Errors name the
// config key.
func (r DataRoots) Resolve(dataDir string) (InputRoots, error) {
	data, err := realPath(dataDir)
	if err != nil {
		return InputRoots{}, fmt.Errorf("resolve the data directory %s: %w", dataDir, err)
	}
	out := InputRoots{data: data, projects: map[string][]dataRoot{}, pools: map[string][]dataRoot{}}
	resolve := func(key string, paths []string) ([]dataRoot, error) {
		var roots []dataRoot
		for i, p := range paths {
			where := fmt.Sprintf("data_roots.%s[%d]", key, i)
			if !filepath.IsAbs(p) {
				return nil, fmt.Errorf("%s: %q is not an absolute path; give the directory jobs may read inputs from, e.g. /datasets", where, p)
			}
			real, err := realPath(p)
			if err != nil {
				return nil, fmt.Errorf("%s: resolve %s: %w", where, p, err)
			}
			if within(data, real) || within(data, filepath.Clean(p)) {
				return nil, fmt.Errorf("%s: %s is the server's data directory %s or inside it, which holds secrets, tokens and every job's files; jobs may never read it: remove it from data_roots", where, p, dataDir)
			}
			roots = append(roots, dataRoot{path: filepath.Clean(p), real: real})
		}
		return roots, nil
	}
	if out.def, err = resolve("default", r.Default); err != nil {
		return InputRoots{}, err
	}
	for _, k := range sortedKeys(r.Projects) {
		if out.projects[k], err = resolve("projects."+k, r.Projects[k]); err != nil {
			return InputRoots{}, err
		}
	}
	for _, k := range sortedKeys(r.Pools) {
		if out.pools[k], err = resolve("pools."+k, r.Pools[k]); err != nil {
			return InputRoots{}, err
		}
	}
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// realPath is p, cleaned, with the symbolic links of its longest existing
// prefix resolved (the rest may not exist yet).
func realPath(p string) (string, error) {
	p = filepath.Clean(p)
	rest := ""
	for {
		r, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(p, rest), nil
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// within reports whether p is root or lies below it, comparing whole path
// elements of cleaned paths (/datasets-evil is not within /datasets).
func within(root, p string) bool {
	root, p = filepath.Clean(root), filepath.Clean(p)
	if root == string(filepath.Separator) {
		return filepath.IsAbs(p)
	}
	return p == root || strings.HasPrefix(p, root+string(filepath.Separator))
}

// forJob lists the roots a job of project in pool may read inputs from.
func (r InputRoots) forJob(project, pool string) []dataRoot {
	return slices.Concat(r.def, r.projects[project], r.pools[pool])
}

// checkPaths checks the spec's paths against the server's layout: a
// user-given outputs.path must lie in the project's own directory under
// the artifact root, and every input under a directory data_roots allows
// for the job's project or pool.
func (s *JobService) checkPaths(spec domain.Spec) error {
	var errs domain.FieldErrors
	s.checkOutputPath(&errs, spec)
	s.checkInputPaths(&errs, spec)
	return errs.Err()
}

// checkOutputPath checks a user-given outputs.path: inside the artifact
// root, in the job's project's directory, with {job_id} a whole element
// below it and no plain number among the directories before it (each job
// has a directory of its own: no job's directory lies inside another's,
// whose path holds its id as a number), and no symbolic link among the
// directories that exist already.
func (s *JobService) checkOutputPath(errs *domain.FieldErrors, spec domain.Spec) {
	p := spec.Outputs.Path
	if p == "" {
		return
	}
	const field = "outputs.path"
	project := filepath.Join(filepath.Clean(s.cfg.ArtifactsRoot), spec.Project)
	example := filepath.Join(project, spec.Name, jobspec.JobOutputPlaceholder)
	p = filepath.Clean(p)
	rel, err := filepath.Rel(project, p)
	if !filepath.IsAbs(project) || err != nil || !within(project, p) || rel == "." {
		errs.Add(field, "%q is outside the directory of project %s's outputs, %s: give a path below it, e.g. %q, or leave outputs.path out to get %s",
			spec.Outputs.Path, spec.Project, project, example, filepath.Join(project, spec.Name, "<job-id>"))
		return
	}
	elems := strings.Split(filepath.ToSlash(rel), "/")
	at := slices.Index(elems, jobspec.JobOutputPlaceholder)
	switch {
	case at < 0:
		errs.Add(field, "%q does not have %s as a whole directory name, so two jobs could share a directory; e.g. %q", spec.Outputs.Path, jobspec.JobOutputPlaceholder, example)
		return
	case at == 0:
		errs.Add(field, "%q puts %s right in the project's directory, among the directories named after jobs; add a directory before it, e.g. %q", spec.Outputs.Path, jobspec.JobOutputPlaceholder, example)
		return
	}
	for _, e := range elems[:at] {
		if isNumber(e) {
			errs.Add(field, "%q has the number %s before %s: it could be another job's directory; name that directory with a letter in it, e.g. %q",
				spec.Outputs.Path, e, jobspec.JobOutputPlaceholder, example)
			return
		}
	}
	// A link among the directories already there would take the job's
	// directory elsewhere when it is made.
	dir := project
	for _, e := range elems[:at] {
		dir = filepath.Join(dir, e)
		fi, err := os.Lstat(dir)
		if err != nil {
			break // not made yet: the server makes it
		}
		if !fi.IsDir() {
			errs.Add(field, "%q passes through %s, which is not a directory (a %s); choose another path below %s", spec.Outputs.Path, dir, fileKind(fi.Mode()), project)
			return
		}
	}
}

func isNumber(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// fileKind names a file type for messages.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m.IsRegular():
		return "regular file"
	}
	return "special file"
}

// checkInputPaths checks that every input lies under a root data_roots
// allows for the job, before and after resolving symbolic links, and
// never in the data directory.
func (s *JobService) checkInputPaths(errs *domain.FieldErrors, spec domain.Spec) {
	if !slices.ContainsFunc(spec.Inputs, func(in domain.Input) bool { return in.FromJob == 0 }) {
		return
	}
	roots := s.cfg.InputRoots.forJob(spec.Project, spec.Pool)
	var allowed []string
	for _, r := range roots {
		if !slices.Contains(allowed, r.path) {
			allowed = append(allowed, r.path)
		}
	}
	for i, in := range spec.Inputs {
		field := fmt.Sprintf("inputs[%d].path", i)
		if in.FromJob != 0 {
			continue // another job's outputs: checked by checkWorkflow
		}
		if len(roots) == 0 {
			errs.Add(field, "%q: this server allows jobs of project %s in pool %s to read no input directories; an admin allows them with data_roots in the server config (e.g. data_roots: {default: [/datasets]}; see docs/operator.md)",
				in.Path, spec.Project, spec.Pool)
			continue
		}
		p := filepath.Clean(in.Path)
		if !slices.ContainsFunc(roots, func(r dataRoot) bool { return within(r.path, p) || within(r.real, p) }) {
			errs.Add(field, "%q is outside the directories jobs of project %s in pool %s may read inputs from: %s; put the dataset under one of them, or ask an admin to add its directory to data_roots",
				in.Path, spec.Project, spec.Pool, strings.Join(allowed, ", "))
			continue
		}
		// Only now, inside an allowed root, look at the disk: a link there
		// must not lead out of the roots.
		real, err := realPath(p)
		if err != nil {
			errs.Add(field, "%q cannot be resolved: %v", in.Path, err)
			continue
		}
		if s.cfg.InputRoots.data != "" && within(s.cfg.InputRoots.data, real) {
			errs.Add(field, "%q is in the server's data directory, which jobs may never read; put the dataset under one of: %s", in.Path, strings.Join(allowed, ", "))
			continue
		}
		if !slices.ContainsFunc(roots, func(r dataRoot) bool { return within(r.real, real) }) {
			errs.Add(field, "%q leads through a symbolic link to %s, outside the directories jobs of project %s in pool %s may read inputs from: %s",
				in.Path, real, spec.Project, spec.Pool, strings.Join(allowed, ", "))
		}
	}
}
