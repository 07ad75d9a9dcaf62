package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/jobspec"
	"trainyard/internal/lazyre"
	"trainyard/internal/store"
)

// EnvService registers and resolves environments.
type EnvService struct {
	*core
	st EnvStore
}

// EnvStore is what the environment use cases read and write.
type EnvStore interface {
	DeprecateEnv(ctx context.Context, name string, version int, reason string, at time.Time, audit domain.AuditRecord) ([]int, error)
	GetEnv(ctx context.Context, name string, version int) (domain.Environment, error)
	ListEnvs(ctx context.Context, name string) ([]domain.Environment, error)
	PutEnv(ctx context.Context, e domain.Environment, audit domain.AuditRecord) error
}

var _ EnvStore = store.Store(nil)

// ImagePinner pins a container image reference by the digest its registry
// answers (imagepin.Pinner): "name:tag@sha256:…", or a reference already
// by digest unchanged once the registry confirmed it. Its errors match
// domain.ErrInvalid (not a reference), domain.ErrNotFound (the registry
// has no such image) or domain.ErrUnavailable (the registry could not be
// asked), and name the registry and its answer.
type ImagePinner interface {
	Pin(ctx context.Context, ref string) (string, error)
}

// Limits on environment definitions.
const (
	maxEnvImageLen    = 512
	maxEnvPathPrefix  = 32
	maxEnvPathLen     = 1024
	maxEnvVars        = 256
	maxEnvVarsBytes   = 64 << 10
	maxEnvCheckArgs   = 64
	maxEnvCheckBytes  = 16 << 10
	maxEnvDescription = 1024
	maxEnvReasonLen   = 500
)

var (
	envVarNameRE = lazyre.New(jobspec.ParamPattern)
	// envImageRE is a container image reference: registry/path:tag or
	// @sha256:digest, without spaces.
	envImageRE = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$`)
)

// EnvDefinition is what RegisterEnv stores as a new version.
type EnvDefinition struct {
	Name        string
	Image       string
	PathPrefix  []string
	Vars        map[string]string
	Check       []string
	Description string
}

// envTarget names an environment (or one version of it) in audit records.
func envTarget(name string, version int) string {
	if version == 0 {
		return "env/" + name
	}
	return "env/" + name + "@" + strconv.Itoa(version)
}

// checkEnvDefinition returns every problem of d, with its field path.
func checkEnvDefinition(d EnvDefinition) domain.FieldErrors {
	var errs domain.FieldErrors
	switch {
	case d.Name == domain.HostEnv:
		errs.Add("name", "host is built in (the machine's own software) and cannot get new versions; register your environment under another name")
	case !domain.ValidEnvName(d.Name):
		errs.Add("name", "%q is not a valid environment name: 1–63 lowercase letters, digits, '.', '_' and '-', starting with a letter or digit, e.g. pytorch-2.4", d.Name)
	}
	if d.Image != "" && (len(d.Image) > maxEnvImageLen || !envImageRE.MatchString(d.Image)) {
		errs.Add("image", "%q is not an image reference: use registry/name:tag or registry/name@sha256:..., at most %d characters, no spaces", d.Image, maxEnvImageLen)
	}
	if len(d.PathPrefix) > maxEnvPathPrefix {
		errs.Add("path_prefix", "has %d directories; the limit is %d", len(d.PathPrefix), maxEnvPathPrefix)
	}
	seen := map[string]bool{}
	for i, dir := range d.PathPrefix {
		p := fmt.Sprintf("path_prefix[%d]", i)
		switch {
		case !filepath.IsAbs(dir):
			errs.Add(p, "%q is not an absolute directory; write it from /, e.g. /opt/pytorch/bin", dir)
		case strings.ContainsAny(dir, ":\x00\n"):
			errs.Add(p, "%q contains ':', a NUL or a newline, which PATH cannot hold; list each directory on its own", dir)
		case len(dir) > maxEnvPathLen:
			errs.Add(p, "is %d characters long; the limit is %d", len(dir), maxEnvPathLen)
		case filepath.Clean(dir) != dir:
			errs.Add(p, "%q is not in its clean form; write %q", dir, filepath.Clean(dir))
		case seen[dir]:
			errs.Add(p, "%q is listed twice", dir)
		}
		seen[dir] = true
	}
	if len(d.Vars) > maxEnvVars {
		errs.Add("vars", "has %d variables; the limit is %d", len(d.Vars), maxEnvVars)
	}
	size := 0
	for _, k := range slices.Sorted(maps.Keys(d.Vars)) {
		v := d.Vars[k]
		size += len(k) + len(v) + 2
		p := "vars." + k
		switch {
		case !envVarNameRE.MatchString(k):
			errs.Add(p, "%q is not a variable name: letters, digits and '_', not starting with a digit", k)
		case k == "PATH":
			errs.Add(p, "PATH is built from the server's PATH; put directories in front of it with path_prefix (--path-prefix DIR)")
		case strings.HasPrefix(k, jobspec.ReservedEnvPrefix):
			errs.Add(p, "names starting with %s are reserved for the variables the platform sets", jobspec.ReservedEnvPrefix)
		case k == "CUDA_VISIBLE_DEVICES":
			errs.Add(p, "CUDA_VISIBLE_DEVICES is set by the platform to the GPUs assigned to the job")
		case strings.IndexByte(v, 0) >= 0:
			errs.Add(p, "the value contains a NUL byte, which an environment variable cannot hold")
		}
	}
	if size > maxEnvVarsBytes {
		errs.Add("vars", "take %d bytes; the limit is %d", size, maxEnvVarsBytes)
	}
	if len(d.Check) > 0 {
		size := 0
		for _, a := range d.Check {
			size += len(a)
		}
		switch {
		case d.Check[0] == "":
			errs.Add("check[0]", "the check's program is empty; name a program, e.g. [python3, -c, 'import torch']")
		case len(d.Check) > maxEnvCheckArgs:
			errs.Add("check", "has %d arguments; the limit is %d", len(d.Check), maxEnvCheckArgs)
		case size > maxEnvCheckBytes:
			errs.Add("check", "takes %d bytes; the limit is %d", size, maxEnvCheckBytes)
		}
		for i, a := range d.Check {
			if strings.IndexByte(a, 0) >= 0 {
				errs.Add(fmt.Sprintf("check[%d]", i), "contains a NUL byte, which a program argument cannot hold")
			}
		}
	}
	if len(d.Description) > maxEnvDescription {
		errs.Add("description", "is %d characters long; the limit is %d", len(d.Description), maxEnvDescription)
	} else if msg := domain.TextProblem(d.Description, true); msg != "" {
		errs.Add("description", "%s", msg)
	}
	if d.Image == "" && len(d.PathPrefix) == 0 && len(d.Vars) == 0 && len(d.Check) == 0 && len(errs) == 0 {
		errs.Add("image", "the environment defines nothing (no image, path_prefix, vars or check), so it would run jobs exactly like host; give at least one of them")
	}
	return errs
}

// EnvRegistration is a registered environment: the version, whether this
// call created it, and what the one registering it should know (an image
// kept by its tag because its registry could not be asked).
type EnvRegistration struct {
	Env      domain.Environment
	Created  bool
	Warnings []string
}

// RegisterEnv is Registration without its warnings.
func (s *EnvService) RegisterEnv(ctx context.Context, p Principal, d EnvDefinition) (env domain.Environment, created bool, err error) {
	r, err := s.Registration(ctx, p, d)
	return r.Env, r.Created, err
}

// Registration stores d as the next version of environment d.Name
// (version 1 for a new name). Versions never change once stored. An image
// given by tag is first pinned by digest (pinImage), so the version names
// exactly the image its registry serves now. When a stored version
// already has d's definition, pinned (see domain.EnvDigest), nothing is
// stored and that version is returned with Created false; when that
// version is deprecated, registering is refused.
func (s *EnvService) Registration(ctx context.Context, p Principal, d EnvDefinition) (EnvRegistration, error) {
	if err := checkEnvDefinition(d).Err(); err != nil {
		return EnvRegistration{}, err
	}
	if err := s.authorize(ctx, p, authz.EnvWrite, authz.Resource{Kind: "env", ID: d.Name}); err != nil {
		return EnvRegistration{}, err
	}
	if s.cfg.LocalEnvs { // after authorize: only those who may register learn what exists
		var errs domain.FieldErrors
		for i, dir := range d.PathPrefix {
			if st, err := os.Stat(dir); err != nil || !st.IsDir() {
				errs.Add(fmt.Sprintf("path_prefix[%d]", i), "%s is not a directory on the server's machine, where jobs run: install the environment there first, or correct the path", dir)
			}
		}
		if err := errs.Err(); err != nil {
			return EnvRegistration{}, err
		}
	}
	// After authorize too: only those who may register make the server
	// ask a registry.
	image, warning, err := s.pinImage(ctx, d.Image)
	if err != nil {
		return EnvRegistration{}, err
	}
	var warnings []string
	if warning != "" {
		warnings = append(warnings, warning)
	}
	rec := domain.Environment{Name: d.Name, Image: image, Description: d.Description}
	if len(d.PathPrefix) > 0 {
		rec.PathPrefix = slices.Clone(d.PathPrefix)
	}
	if len(d.Vars) > 0 {
		rec.Vars = maps.Clone(d.Vars)
	}
	if len(d.Check) > 0 {
		rec.Check = slices.Clone(d.Check)
	}
	rec.Digest = domain.EnvDigest(rec)
	for range 5 { // another register of the same name may take our version
		versions, err := s.st.ListEnvs(ctx, d.Name)
		if err != nil {
			return EnvRegistration{}, fmt.Errorf("read environment %s: %w", d.Name, err)
		}
		latest := 0
		for _, v := range versions {
			latest = max(latest, v.Version)
		}
		for i := len(versions) - 1; i >= 0; i-- {
			v := versions[i]
			if v.Digest != rec.Digest {
				continue
			}
			if v.Deprecated {
				return EnvRegistration{}, domain.Errorf(domain.ErrConflict,
					"this definition is the same as %s, which is deprecated (%s); change the definition (e.g. a fixed image or check) to register a new version",
					v.Ref(), deprecationNote(v))
			}
			return EnvRegistration{Env: v, Warnings: warnings}, nil
		}
		rec.Version = latest + 1
		rec.CreatedBy, rec.CreatedAt = p.Actor(), s.cfg.Clock.Now()
		var before any
		if latest > 0 {
			before = map[string]any{"version": latest}
		}
		// What runs inside every job that names the environment is
		// recorded in full: its check command and PATH prefix.
		after := map[string]any{"version": rec.Version, "digest": rec.Digest}
		if len(rec.Check) > 0 {
			after["check"] = rec.Check
		}
		if len(rec.PathPrefix) > 0 {
			after["path_prefix"] = rec.PathPrefix
		}
		if rec.Image != "" {
			after["image"] = rec.Image
		}
		actx := s.audited(ctx, p, authz.EnvWrite, envTarget(d.Name, 0), before, after)
		err = s.st.PutEnv(ctx, rec, actx)
		if errors.Is(err, domain.ErrConflict) {
			continue
		}
		if err != nil {
			return EnvRegistration{}, fmt.Errorf("store environment %s: %w", rec.Ref(), err)
		}
		s.envsChanged()
		return EnvRegistration{Env: rec, Created: true, Warnings: warnings}, nil
	}
	return EnvRegistration{}, domain.Errorf(domain.ErrConflict, "environment %s kept changing while it was being registered; try again", d.Name)
}

// pinImage returns image pinned by digest (Config.Images), or a refusal
// on the image field that says what the registry answered and what to do:
//
//   - an image the registry has not (no such repository, tag or digest),
//     or that is not a reference, is refused;
//   - an image by tag that could not be pinned (the registry could not be
//     asked) is refused with Config.RequirePinnedImages, and otherwise
//     kept by its tag, with a warning for the one registering it;
//   - an image by digest is pinned already: when its registry cannot be
//     asked it is kept as given.
//
// Without Config.Images the image is kept as given.
func (s *EnvService) pinImage(ctx context.Context, image string) (pinned, warning string, err error) {
	if image == "" || s.cfg.Images == nil {
		return image, "", nil
	}
	refuse := func(format string, args ...any) (string, string, error) {
		return "", "", domain.FieldErrors{{Path: "image", Message: fmt.Sprintf(format, args...)}}
	}
	byDigest := strings.Contains(image, "@")
	got, err := s.cfg.Images.Pin(ctx, image)
	switch {
	case err == nil:
		if len(got) > maxEnvImageLen {
			return refuse("pinned by digest, %q is %d characters long; the limit is %d: use a shorter name", got, len(got), maxEnvImageLen)
		}
		return got, "", nil
	case errors.Is(err, domain.ErrInvalid):
		return refuse("%v; use registry/name:tag or registry/name@sha256:...", err)
	case errors.Is(err, domain.ErrNotFound):
		return refuse("%v: check the repository and the tag or digest (or push the image first)", err)
	case !errors.Is(err, domain.ErrUnavailable):
		return "", "", fmt.Errorf("pin image %s: %w", image, err) // e.g. the request was canceled
	case byDigest:
		return image, "", nil
	case s.cfg.RequirePinnedImages:
		return refuse("cannot pin %s by digest: %v. This server stores images only pinned by digest (envs.pin_images: required): make sure it can reach the registry, or give the image by digest (%s@sha256:...)",
			image, err, image)
	}
	s.cfg.Logger.Warn("environment image kept by its tag: its registry could not be asked", "image", image, "err", err)
	return image, fmt.Sprintf("image %s is stored by its tag, not pinned by digest: %v. Jobs will run whatever the tag names when they start; "+
		"register the environment again once the server can reach the registry (that makes a new version, pinned), or give the image by digest", image, err), nil
}

// ListEnvs returns every version of environment name ("" for all),
// ordered by name then version.
func (s *EnvService) ListEnvs(ctx context.Context, p Principal, name string) ([]domain.Environment, error) {
	if name != "" && !domain.ValidEnvName(name) {
		return nil, domain.FieldErrors{{Path: "name", Message: fmt.Sprintf("%q is not a valid environment name", name)}}
	}
	if err := s.authorize(ctx, p, authz.EnvRead, authz.Resource{Kind: "env"}); err != nil {
		return nil, err
	}
	list, err := s.st.ListEnvs(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("list environments: %w", err)
	}
	if name != "" && len(list) == 0 {
		return nil, envNotFound(name)
	}
	if list == nil {
		list = []domain.Environment{}
	}
	return list, nil
}

// GetEnv returns version of environment name (0: the latest, deprecated
// or not).
func (s *EnvService) GetEnv(ctx context.Context, p Principal, name string, version int) (domain.Environment, error) {
	if err := checkEnvRef(name, version); err != nil {
		return domain.Environment{}, err
	}
	if err := s.authorize(ctx, p, authz.EnvRead, authz.Resource{Kind: "env", ID: name}); err != nil {
		return domain.Environment{}, err
	}
	return s.getEnv(ctx, name, version)
}

// getEnv reads one version, with errors that say what exists.
func (s *EnvService) getEnv(ctx context.Context, name string, version int) (domain.Environment, error) {
	e, err := s.st.GetEnv(ctx, name, version)
	if errors.Is(err, domain.ErrNotFound) {
		if version > 0 {
			if latest, lerr := s.st.GetEnv(ctx, name, 0); lerr == nil {
				return domain.Environment{}, domain.Errorf(domain.ErrNotFound, "environment %s has no version %d; the latest is %s (see trainyard env show %s)", name, version, latest.Ref(), name)
			}
		}
		return domain.Environment{}, envNotFound(name)
	}
	if err != nil {
		return domain.Environment{}, fmt.Errorf("read environment %s: %w", name, err)
	}
	return e, nil
}

func envNotFound(name string) error {
	return domain.Errorf(domain.ErrNotFound, "no environment is named %s; list environments with: trainyard env ls", name)
}

func checkEnvRef(name string, version int) error {
	var errs domain.FieldErrors
	if !domain.ValidEnvName(name) {
		errs.Add("name", "%q is not a valid environment name: 1–63 lowercase letters, digits, '.', '_' and '-'", name)
	}
	if version < 0 {
		errs.Add("version", "must be 1 or more (0: the latest), got %d", version)
	}
	return errs.Err()
}

// DeprecateEnv marks version of environment name deprecated (0: every
// version). Jobs can no longer be submitted with a deprecated version;
// jobs already submitted keep it. It returns the versions concerned, as
// stored afterwards; deprecating a deprecated version changes nothing.
func (s *EnvService) DeprecateEnv(ctx context.Context, p Principal, name string, version int, reason string) ([]domain.Environment, error) {
	if err := checkEnvRef(name, version); err != nil {
		return nil, err
	}
	reason = strings.TrimSpace(reason)
	switch {
	case len(reason) > maxEnvReasonLen:
		return nil, domain.FieldErrors{{Path: "reason", Message: fmt.Sprintf("is %d characters long; the limit is %d", len(reason), maxEnvReasonLen)}}
	case domain.TextProblem(reason, false) != "":
		return nil, domain.FieldErrors{{Path: "reason", Message: domain.TextProblem(reason, false)}}
	}
	if err := s.authorize(ctx, p, authz.EnvWrite, authz.Resource{Kind: "env", ID: name}); err != nil {
		return nil, err
	}
	if _, err := s.getEnv(ctx, name, version); err != nil {
		return nil, err
	}
	concerned := func() ([]domain.Environment, error) {
		all, err := s.st.ListEnvs(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("read environment %s: %w", name, err)
		}
		return slices.DeleteFunc(all, func(e domain.Environment) bool { return version != 0 && e.Version != version }), nil
	}
	list, err := concerned()
	if err != nil {
		return nil, err
	}
	var pending []int
	for _, e := range list {
		if !e.Deprecated {
			pending = append(pending, e.Version)
		}
	}
	if len(pending) == 0 {
		return list, nil // deprecated already: nothing to record
	}
	actx := s.audited(ctx, p, authz.EnvWrite, envTarget(name, version), nil,
		map[string]any{"deprecated": pending, "reason": reason})
	if _, err := s.st.DeprecateEnv(ctx, name, version, reason, s.cfg.Clock.Now(), actx); err != nil {
		return nil, fmt.Errorf("deprecate %s: %w", envTarget(name, version), err)
	}
	s.envsChanged()
	return concerned()
}

// EnsureHostEnv stores the built-in environment host@1 when it is missing
// (a fresh install). The server calls it at start.
func (s *EnvService) EnsureHostEnv(ctx context.Context) error {
	_, err := s.st.GetEnv(ctx, domain.HostEnv, 1)
	if err == nil {
		return nil
	}
	if !errors.Is(err, domain.ErrNotFound) {
		return fmt.Errorf("read environment host@1: %w", err)
	}
	host := domain.HostEnvironment(s.cfg.Clock.Now())
	actx := s.auditedAs(ctx, "system:bootstrap", authz.EnvWrite, envTarget(host.Name, 0), nil,
		map[string]any{"version": host.Version, "digest": host.Digest})
	err = s.st.PutEnv(ctx, host, actx)
	if err != nil && !errors.Is(err, domain.ErrConflict) { // ErrConflict: another server stored it
		return fmt.Errorf("store the built-in environment host@1: %w", err)
	}
	s.envsChanged()
	return nil
}

// deprecationNote is "reason: R", or says that none was given.
func deprecationNote(e domain.Environment) string {
	if e.DeprecatedReason == "" {
		return "no reason given"
	}
	return "reason: " + e.DeprecatedReason
}

// resolveSpecEnv checks the environment a submitted spec names and pins it:
// "name@N" must exist and not be deprecated; "name" resolves to its latest
// version that is not deprecated. spec.Env becomes "name@N", so the stored
// spec records what the job runs in. Problems are field errors on env.
func (s *EnvService) resolveSpecEnv(ctx context.Context, spec *domain.Spec) error {
	e, err := s.ResolveEnv(ctx, spec.Env)
	if err != nil {
		return err
	}
	spec.Env = e.Ref()
	return nil
}

// ResolveEnv returns the environment ref names for a new job: "name@N"
// (which must exist and not be deprecated) or "name" (its latest version
// that is not deprecated); "" means host. Host resolves to the built-in
// host@1 until a host environment is stored. A refusal is a field error on
// env that says what to use instead.
func (s *EnvService) ResolveEnv(ctx context.Context, ref string) (domain.Environment, error) {
	if ref == "" {
		ref = domain.HostEnv
	}
	refuse := func(format string, args ...any) (domain.Environment, error) {
		return domain.Environment{}, domain.FieldErrors{{Path: "env", Message: fmt.Sprintf(format, args...)}}
	}
	name, version, err := domain.ParseEnvRef(ref)
	if err != nil {
		return refuse("%v", err)
	}
	versions, err := s.envVersions(ctx, name)
	if err != nil {
		return domain.Environment{}, fmt.Errorf("read environment %s: %w", name, err)
	}
	if len(versions) == 0 && name == domain.HostEnv {
		versions = []domain.Environment{domain.HostEnvironment(s.cfg.Clock.Now())}
	}
	if len(versions) == 0 {
		return refuse("environment %s is not registered; see trainyard env ls for the registered ones, or ask an admin to register it with trainyard env register %s", name, name)
	}
	var usable *domain.Environment // the latest version not deprecated
	for i := range versions {
		if !versions[i].Deprecated {
			usable = &versions[i]
		}
	}
	instead := func() string {
		if usable != nil {
			return "use " + usable.Ref() + ", or see trainyard env ls"
		}
		return "every version of " + name + " is deprecated; register a new one (trainyard env register " + name + "), or see trainyard env ls"
	}
	if version == 0 {
		if usable == nil {
			last := versions[len(versions)-1]
			return refuse("environment %s is deprecated (%s: %s); %s", name, last.Ref(), deprecationNote(last), instead())
		}
		return *usable, nil
	}
	i := slices.IndexFunc(versions, func(e domain.Environment) bool { return e.Version == version })
	if i < 0 {
		return refuse("environment %s has no version %d (the latest is %s); %s", name, version, versions[len(versions)-1].Ref(), instead())
	}
	if e := versions[i]; e.Deprecated {
		return refuse("environment %s is deprecated (%s); %s", e.Ref(), deprecationNote(e), instead())
	}
	return versions[i], nil
}

// envCacheEntry is one environment's versions as last read; submit resolves
// the job's environment from it instead of reading the store every time.
type envCacheEntry struct {
	gen      uint64
	at       time.Time
	versions []domain.Environment // shared: never modified
}

// envVersions returns name's versions, cached until an environment changes
// (here, or on another replica: Invalidate("envs")) or Config.CacheTTL.
func (s *EnvService) envVersions(ctx context.Context, name string) ([]domain.Environment, error) {
	gen, now := s.envGen.Load(), s.cfg.Clock.Now()
	if e, ok := s.envCache.Load(name); ok {
		if ce := e.(envCacheEntry); ce.gen == gen && (s.cfg.CacheTTL <= 0 || now.Sub(ce.at) < s.cfg.CacheTTL) {
			return ce.versions, nil
		}
	}
	versions, err := s.st.ListEnvs(ctx, name)
	if err != nil {
		return nil, err
	}
	s.envCache.Store(name, envCacheEntry{gen: gen, at: now, versions: versions})
	return versions, nil
}

// envsChanged drops the cached environments here and on other replicas.
func (s *EnvService) envsChanged() {
	s.invalidate("envs")
	if s.cfg.Broadcast != nil {
		s.cfg.Broadcast("envs")
	}
}
