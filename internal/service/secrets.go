package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/jobspec"
	"trainyard/internal/lazyre"
	"trainyard/internal/secrets"
	"trainyard/internal/store"
)

// SecretService keeps sealed secrets and resolves them for jobs.
type SecretService struct {
	*core
	st SecretStore
}

// SecretStore is what the secret use cases read and write: sealed
// secret versions.
type SecretStore interface {
	DeleteSecret(ctx context.Context, project, name string, audit domain.AuditRecord) error
	LatestSecret(ctx context.Context, project, name string) (store.Secret, error)
	ListSecrets(ctx context.Context) ([]store.Secret, error)
	PutSecret(ctx context.Context, s store.Secret, audit domain.AuditRecord) error
	RekeySecrets(ctx context.Context, reseal func(store.Secret) (store.Secret, error), audit domain.AuditRecord) (int, error)
}

var _ SecretStore = store.Store(nil)

// Limits on secret values.
const (
	// MinSecretLen is the shortest value accepted: the log redaction leaves
	// shorter strings alone, so a shorter secret would show in logs.
	MinSecretLen = 4
	// MaxSecretLen bounds a value (it travels in the environment and must
	// fit in one log line to be redacted).
	MaxSecretLen = 32 << 10
	// maxSecretNameLen bounds a secret's name.
	maxSecretNameLen = 128
)

var (
	secretNameRE  = lazyre.New(jobspec.SecretPattern)
	projectNameRE = lazyre.New(jobspec.NamePattern)
)

// SecretInfo describes one secret's newest version. It never holds the value.
type SecretInfo struct {
	Project   string // "" for a global secret
	Name      string
	Version   int
	KeyID     string // the master key that sealed it
	CreatedBy string // who set this version, e.g. "user:alice"
	CreatedAt time.Time
	// Shadowed marks a global secret hidden from the listed project by the
	// project's own secret of the same name.
	Shadowed bool
}

// RotateResult is the outcome of RotateMasterKey.
type RotateResult struct {
	OldKeyID string
	NewKeyID string
	Resealed int // stored versions re-encrypted
}

// secretTarget names a secret in audit records: "secret/NAME" for a global
// one, "secret/PROJECT/NAME" for a project's.
func secretTarget(project, name string) string {
	if project == "" {
		return "secret/" + name
	}
	return "secret/" + project + "/" + name
}

// secretLabel names a secret in messages.
func secretLabel(project, name string) string {
	if project == "" {
		return "global secret " + name
	}
	return "secret " + name + " of project " + project
}

// checkSecretRef validates a secret's name and project.
func checkSecretRef(project, name string) domain.FieldErrors {
	var errs domain.FieldErrors
	switch {
	case !secretNameRE.MatchString(name):
		errs.Add("name", "%q is not a valid secret name: use uppercase letters, digits and '_', not starting with a digit, e.g. WANDB_API_KEY", name)
	case len(name) > maxSecretNameLen:
		errs.Add("name", "is %d characters long; the limit is %d", len(name), maxSecretNameLen)
	case strings.HasPrefix(name, jobspec.ReservedEnvPrefix):
		errs.Add("name", "%q starts with %s, which is reserved for the variables the platform sets; choose another name", name, jobspec.ReservedEnvPrefix)
	}
	if project != "" && !projectNameRE.MatchString(project) {
		errs.Add("project", "%q is not a valid project name: 1–63 lowercase letters, digits and '-'", project)
	}
	return errs
}

// keyring returns the configured keyring or an error saying there is none.
func (s *SecretService) keyring() (*secrets.Keyring, error) {
	if s.cfg.Keyring == nil {
		return nil, errors.New("this server has no master key configured, so it cannot store or read secrets")
	}
	return s.cfg.Keyring, nil
}

// SetSecret stores value as a new version of the secret (version 1 when it
// is new). project "" sets a global secret. The value never appears in an
// error, a log line or an audit record.
func (s *SecretService) SetSecret(ctx context.Context, p Principal, project, name string, value []byte) (SecretInfo, error) {
	errs := checkSecretRef(project, name)
	switch {
	case len(value) < MinSecretLen:
		errs.Add("value", "is %d bytes long; a secret needs at least %d, because shorter values cannot be hidden in logs", len(value), MinSecretLen)
	case len(value) > MaxSecretLen:
		errs.Add("value", "is %d bytes long; the limit is %d", len(value), MaxSecretLen)
	case bytes.IndexByte(value, 0) >= 0:
		errs.Add("value", "contains a NUL byte, which an environment variable cannot hold")
	}
	if err := errs.Err(); err != nil {
		return SecretInfo{}, err
	}
	if err := s.authorize(ctx, p, authz.SecretWrite, authz.Resource{Kind: "secret", ID: name, Project: project}); err != nil {
		return SecretInfo{}, err
	}
	ring, err := s.keyring()
	if err != nil {
		return SecretInfo{}, err
	}
	for range 5 { // another set of the same secret may take our version
		latest, err := s.st.LatestSecret(ctx, project, name)
		switch {
		case errors.Is(err, domain.ErrNotFound):
			latest = store.Secret{}
		case err != nil:
			return SecretInfo{}, fmt.Errorf("read %s: %w", secretLabel(project, name), err)
		}
		rec := store.Secret{Project: project, Name: name, Version: latest.Version + 1,
			CreatedBy: p.Actor(), CreatedAt: s.cfg.Clock.Now()}
		err = ring.With(func(k *secrets.Key) error {
			sealed, err := k.Seal(secrets.Scope{Project: project, Name: name, Version: rec.Version}, value)
			if err != nil {
				return err
			}
			rec.KeyID, rec.Nonce, rec.Ciphertext = sealed.KeyID, sealed.Nonce, sealed.Ciphertext
			var before any
			if latest.Version > 0 {
				before = map[string]any{"version": latest.Version}
			}
			actx := s.audited(ctx, p, authz.SecretWrite, secretTarget(project, name), before,
				map[string]any{"version": rec.Version, "key_id": rec.KeyID})
			return s.st.PutSecret(ctx, rec, actx)
		})
		if errors.Is(err, domain.ErrConflict) {
			continue
		}
		if err != nil {
			return SecretInfo{}, fmt.Errorf("store %s: %w", secretLabel(project, name), err)
		}
		return infoOf(rec), nil
	}
	return SecretInfo{}, domain.Errorf(domain.ErrConflict, "%s kept changing while it was being set; try again", secretLabel(project, name))
}

func infoOf(r store.Secret) SecretInfo {
	return SecretInfo{Project: r.Project, Name: r.Name, Version: r.Version, KeyID: r.KeyID, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt}
}

// ListSecrets returns the newest version of secrets, never their values,
// sorted by project ("" first) then name. project "" lists every secret;
// otherwise the project's secrets and the global ones it sees, with global
// ones it overrides marked Shadowed.
func (s *SecretService) ListSecrets(ctx context.Context, p Principal, project string) ([]SecretInfo, error) {
	if project != "" && !projectNameRE.MatchString(project) {
		return nil, domain.FieldErrors{{Path: "project", Message: fmt.Sprintf("%q is not a valid project name: 1–63 lowercase letters, digits and '-'", project)}}
	}
	if err := s.authorize(ctx, p, authz.SecretRead, authz.Resource{Kind: "secret", Project: project}); err != nil {
		return nil, err
	}
	all, err := s.st.ListSecrets(ctx)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	own := map[string]bool{}
	for _, r := range all {
		if project != "" && r.Project == project {
			own[r.Name] = true
		}
	}
	out := []SecretInfo{}
	for _, r := range all {
		if project != "" && r.Project != project && r.Project != "" {
			continue
		}
		info := infoOf(r)
		info.Shadowed = project != "" && r.Project == "" && own[r.Name]
		out = append(out, info)
	}
	return out, nil
}

// DeleteSecret removes every version of a secret. Jobs that name it and
// have not started yet fail at launch unless a global secret of the same
// name remains.
func (s *SecretService) DeleteSecret(ctx context.Context, p Principal, project, name string) error {
	if err := checkSecretRef(project, name).Err(); err != nil {
		return err
	}
	if err := s.authorize(ctx, p, authz.SecretWrite, authz.Resource{Kind: "secret", ID: name, Project: project}); err != nil {
		return err
	}
	latest, err := s.st.LatestSecret(ctx, project, name)
	if errors.Is(err, domain.ErrNotFound) {
		return domain.Errorf(domain.ErrNotFound, "%s does not exist; list secrets with: trainyard secret ls%s", secretLabel(project, name), projectFlag(project))
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", secretLabel(project, name), err)
	}
	actx := s.audited(ctx, p, authz.SecretWrite, secretTarget(project, name), map[string]any{"version": latest.Version}, map[string]any{"deleted": true})
	err = s.st.DeleteSecret(ctx, project, name, actx)
	if errors.Is(err, domain.ErrNotFound) {
		return domain.Errorf(domain.ErrNotFound, "%s does not exist; list secrets with: trainyard secret ls%s", secretLabel(project, name), projectFlag(project))
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", secretLabel(project, name), err)
	}
	return nil
}

func projectFlag(project string) string {
	if project == "" {
		return ""
	}
	return " --project " + project
}

// RotateMasterKey re-encrypts every stored secret version under the key in
// newKeyFile (a file on the server's machine, mode 0600) in one
// transaction, then makes it the server's key. Versions already sealed with
// the new key are kept, so repeating an interrupted rotation is safe. The
// operator must then configure the server to load the new key at its next
// start (docs/secrets.md).
func (s *SecretService) RotateMasterKey(ctx context.Context, p Principal, newKeyFile string) (RotateResult, error) {
	if newKeyFile == "" {
		return RotateResult{}, domain.FieldErrors{{Path: "new_key_file", Message: "is required: the path, on the server's machine, of a file holding the new 32-byte key (mode 0600)"}}
	}
	if err := s.authorize(ctx, p, authz.SecretRotate, authz.Resource{Kind: "secret"}); err != nil {
		return RotateResult{}, err
	}
	ring, err := s.keyring()
	if err != nil {
		return RotateResult{}, err
	}
	next, err := secrets.LoadKeyFile(newKeyFile)
	if err != nil {
		return RotateResult{}, domain.Errorf(domain.ErrInvalid, "cannot use the new key: %v", err)
	}
	res := RotateResult{NewKeyID: next.ID()}
	err = ring.Rotate(next, func(cur *secrets.Key) error {
		res.OldKeyID = cur.ID()
		if cur.ID() == next.ID() {
			return domain.Errorf(domain.ErrInvalid, "the new key %s is the key in use; generate a fresh one with: head -c 32 /dev/urandom > new.key", next.ID())
		}
		actx := s.audited(ctx, p, authz.SecretRotate, "secrets", map[string]any{"key_id": cur.ID()}, map[string]any{"key_id": next.ID()})
		n, err := s.st.RekeySecrets(ctx, func(r store.Secret) (store.Secret, error) {
			if r.KeyID == next.ID() {
				return r, nil
			}
			sealed, err := secrets.Reseal(cur, next, secrets.Scope{Project: r.Project, Name: r.Name, Version: r.Version},
				secrets.Sealed{KeyID: r.KeyID, Nonce: r.Nonce, Ciphertext: r.Ciphertext})
			if err != nil {
				return store.Secret{}, err
			}
			r.KeyID, r.Nonce, r.Ciphertext = sealed.KeyID, sealed.Nonce, sealed.Ciphertext
			return r, nil
		}, actx)
		res.Resealed = n
		return err
	})
	if err != nil {
		if errors.Is(err, secrets.ErrWrongKey) || errors.Is(err, secrets.ErrTampered) {
			return RotateResult{}, domain.Errorf(domain.ErrConflict, "rotation aborted, nothing changed: %v", err)
		}
		return RotateResult{}, err
	}
	s.cfg.Logger.Info("master key rotated", "old_key_id", res.OldKeyID, "new_key_id", res.NewKeyID, "resealed", res.Resealed)
	return res, nil
}

// findSecret returns the newest version of name as project sees it: the
// project's own secret, else the global one.
func (s *SecretService) findSecret(ctx context.Context, project, name string) (store.Secret, error) {
	if project != "" {
		r, err := s.st.LatestSecret(ctx, project, name)
		if !errors.Is(err, domain.ErrNotFound) {
			return r, err
		}
	}
	return s.st.LatestSecret(ctx, "", name)
}

// checkSpecSecrets reports, as field errors, the secrets a spec names that
// neither its project nor the global scope holds.
func (s *SecretService) checkSpecSecrets(ctx context.Context, spec domain.Spec) error {
	var errs domain.FieldErrors
	for i, name := range spec.Secrets {
		_, err := s.findSecret(ctx, spec.Project, name)
		if errors.Is(err, domain.ErrNotFound) {
			errs.Add(fmt.Sprintf("secrets[%d]", i), "no secret named %s exists for project %s or globally; create it with: trainyard secret set %s --project %s (the value is read from stdin)",
				name, spec.Project, name, spec.Project)
			continue
		}
		if err != nil {
			return fmt.Errorf("look up secret %s: %w", name, err)
		}
	}
	return errs.Err()
}

// ResolveSecrets returns, for a job of project, "NAME=value" environment
// entries for names (the project's secret, else the global one) and the
// values, for log redaction. It is the control loop's view and takes no
// principal: submit already checked the job. Errors name secrets and keys,
// never values.
func (s *SecretService) ResolveSecrets(ctx context.Context, project string, names []string) (env, values []string, err error) {
	ring, err := s.keyring()
	if err != nil {
		return nil, nil, err
	}
	err = ring.With(func(k *secrets.Key) error {
		for _, name := range names {
			r, err := s.findSecret(ctx, project, name)
			if errors.Is(err, domain.ErrNotFound) {
				return domain.Errorf(domain.ErrNotFound, "secret %s no longer exists for project %s or globally; set it with: trainyard secret set %s --project %s, then resubmit", name, project, name, project)
			}
			if err != nil {
				return fmt.Errorf("look up secret %s: %w", name, err)
			}
			v, err := k.Open(secrets.Scope{Project: r.Project, Name: r.Name, Version: r.Version},
				secrets.Sealed{KeyID: r.KeyID, Nonce: r.Nonce, Ciphertext: r.Ciphertext})
			if err != nil {
				return err
			}
			env = append(env, name+"="+string(v))
			if !slices.Contains(values, string(v)) {
				values = append(values, string(v))
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return env, values, nil
}

// CheckSecretKeys reports stored secrets that the current master key cannot
// open because another key sealed them: the server logs it at start, so a
// forgotten key change after a rotation shows at once rather than at a
// job's launch.
func (s *SecretService) CheckSecretKeys(ctx context.Context) error {
	ring, err := s.keyring()
	if err != nil {
		return err
	}
	all, err := s.st.ListSecrets(ctx)
	if err != nil {
		return fmt.Errorf("list secrets: %w", err)
	}
	cur := ring.Current().ID()
	others := map[string]int{}
	for _, r := range all {
		if r.KeyID != cur {
			others[r.KeyID]++
		}
	}
	if len(others) == 0 {
		return nil
	}
	var parts []string
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range others {
			if !yield(id) {
				return
			}
		}
	}) {
		parts = append(parts, fmt.Sprintf("%d sealed with %s", others[id], id))
	}
	return fmt.Errorf("%w: the master key in use is %s, but of the stored secrets %s; start the server with the key that sealed them (docs/secrets.md)",
		secrets.ErrWrongKey, cur, strings.Join(parts, ", "))
}
