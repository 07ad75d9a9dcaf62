package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

// errEnv marks a launch whose environment could not be read.
var errEnv = errors.New("cannot apply the job's environment")

// applyEnv applies the environment the job's spec names (pinned at submit,
// "name@N") to l: its PATH prefix goes in front of PATH, its variables are
// added unless the job's env_vars set the same name (the job wins), and
// its check command becomes l.Check, to run in l.CheckEnv. The built-in
// host, and a host the store does not hold yet, change nothing.
func (c *Controller) applyEnv(ctx context.Context, l *executor.Launch, spec domain.Spec) error {
	ref := spec.Env
	if ref == "" {
		ref = domain.HostEnv
	}
	name, version, err := domain.ParseEnvRef(ref)
	if err != nil {
		return fmt.Errorf("%w %s: %v", errEnv, ref, err)
	}
	env, err := c.envs.get(ctx, c.cfg.Store, name, version)
	switch {
	case errors.Is(err, domain.ErrNotFound) && name == domain.HostEnv:
		return nil
	case errors.Is(err, domain.ErrNotFound):
		return fmt.Errorf("%w: environment %s is not registered on this server; register it (trainyard env register) or resubmit with another env", errEnv, ref)
	case err != nil:
		return fmt.Errorf("%w %s: %v", errEnv, ref, err)
	}
	l.Env = withEnvironment(l.Env, env, spec.EnvVars)
	l.Image = env.Image
	if len(env.Check) > 0 {
		l.Check = slices.Clone(env.Check)
		// The check verifies the environment, not the job: it gets none of
		// the job's variables or secrets (nor, from the executor, its
		// working directory), so a job cannot make it pass for others
		// when the executor remembers a pass (envcheck.go).
		l.CheckEnv = withEnvironment(c.cfg.BaseEnv, env, nil)
		l.EnvRef, l.EnvDigest = env.Ref(), env.Digest
	}
	return nil
}

// envCacheMax bounds the environment versions an envCache keeps; past it,
// it starts afresh.
const envCacheMax = 256

// envCache keeps the environment versions read for launches and lineage,
// so that a launch does not read its job's environment again. A stored
// version never changes but for its deprecation (store.Envs), which
// neither reads, so a version read once stays right on every replica;
// only pinned versions ("name@N") are kept, and only those found, so a
// host environment registered later is seen. Safe for concurrent use
// (lineage is recorded off the loop).
type envCache struct {
	mu sync.Mutex
	m  map[envKey]domain.Environment
}

type envKey struct {
	name    string
	version int
}

// get returns version of name as Store.GetEnv does, from the cache when
// it holds it.
func (e *envCache) get(ctx context.Context, st Store, name string, version int) (domain.Environment, error) {
	if version <= 0 { // the latest version: it changes
		return st.GetEnv(ctx, name, version)
	}
	k := envKey{name, version}
	e.mu.Lock()
	env, ok := e.m[k]
	e.mu.Unlock()
	if ok {
		return env, nil
	}
	env, err := st.GetEnv(ctx, name, version)
	if err != nil {
		return env, err
	}
	e.mu.Lock()
	if e.m == nil || len(e.m) >= envCacheMax {
		e.m = map[envKey]domain.Environment{}
	}
	e.m[k] = env
	e.mu.Unlock()
	return env, nil
}

// checkNote returns words for a Started event whose attempt skipped the
// environment's check ("" when it ran or there is none).
func checkNote(ev executor.Event) string {
	if ev.CheckNote == "" {
		return ""
	}
	return "; " + ev.CheckNote
}

// withEnvironment returns base with env's PATH prefix and variables
// applied. A variable already in base from the server (HOME, LANG …) is
// replaced in place, so every name appears once; one the job sets itself
// (jobVars) is left alone.
func withEnvironment(base []string, env domain.Environment, jobVars map[string]string) []string {
	out := slices.Clone(base)
	if len(env.PathPrefix) > 0 {
		prefix := strings.Join(env.PathPrefix, ":")
		i := slices.IndexFunc(out, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") })
		switch {
		case i < 0:
			out = append(out, "PATH="+prefix)
		case out[i] == "PATH=":
			out[i] = "PATH=" + prefix
		default:
			out[i] = "PATH=" + prefix + ":" + strings.TrimPrefix(out[i], "PATH=")
		}
	}
	for _, k := range sortedKeys(env.Vars) {
		if _, mine := jobVars[k]; mine {
			continue
		}
		kv := k + "=" + env.Vars[k]
		if i := slices.IndexFunc(out, func(s string) bool { return strings.HasPrefix(s, k+"=") }); i >= 0 {
			out[i] = kv
			continue
		}
		out = append(out, kv)
	}
	return out
}
