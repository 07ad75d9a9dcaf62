// Package router drives several executors as one: each pool names the
// executor its jobs run on (domain.Pool.Executor, carried by
// executor.Launch.Executor), and the router hands every call for an
// attempt to that executor. One server can so run local, Kubernetes and
// Slurm pools at once while the control loop sees a single executor.
//
// What outlives attempts (logs, outputs) is read through one Files: every
// executor keeps it in the server's layout.
package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

// Router is an executor.Executor that routes each attempt to the executor
// its pool names.
type Router struct {
	executor.Files
	def    string
	execs  map[string]executor.Executor
	names  []string // sorted, the default first
	events chan executor.Event
	caps   executor.Capabilities

	mu    sync.Mutex
	owner map[executor.Ref]string // the executor each launched attempt went to
}

var _ executor.Executor = (*Router)(nil)

// New returns a router over execs (by name). Launches that name no
// executor go to def, which must be among them; files reads what every
// executor keeps.
func New(def string, execs map[string]executor.Executor, files executor.Files) (*Router, error) {
	if _, ok := execs[def]; !ok {
		return nil, fmt.Errorf("router: the default executor %q is not among those given", def)
	}
	r := &Router{Files: files, def: def, execs: execs, owner: map[executor.Ref]string{},
		events: make(chan executor.Event, 1024)}
	for name := range execs {
		if name != def {
			r.names = append(r.names, name)
		}
	}
	sort.Strings(r.names)
	r.names = append([]string{def}, r.names...)
	for _, name := range r.names {
		c := execs[name].Capabilities()
		r.caps.MultiNode = r.caps.MultiNode || c.MultiNode
		r.caps.Containers = r.caps.Containers || c.Containers
		r.caps.MemoryLimits = r.caps.MemoryLimits || c.MemoryLimits
		r.caps.CPULimits = r.caps.CPULimits || c.CPULimits
		r.caps.Warn = r.caps.Warn || c.Warn
		for _, k := range c.GPUKinds {
			if !slices.Contains(r.caps.GPUKinds, k) {
				r.caps.GPUKinds = append(r.caps.GPUKinds, k)
			}
		}
		go r.forward(execs[name].Events())
	}
	return r, nil
}

// forward copies one executor's events into the router's channel. It
// ends with the executor's channel.
func (r *Router) forward(in <-chan executor.Event) {
	for ev := range in {
		r.events <- ev
	}
}

// Names lists the executors, the default first.
func (r *Router) Names() []string { return slices.Clone(r.names) }

// Executor returns the executor called name.
func (r *Router) Executor(name string) (executor.Executor, bool) {
	ex, ok := r.execs[name]
	return ex, ok
}

// Capabilities is what any of the executors can do: a pool's own
// executor decides at launch (Launch refuses what it cannot run).
func (r *Router) Capabilities() executor.Capabilities { return r.caps }

// Events delivers every executor's events.
func (r *Router) Events() <-chan executor.Event { return r.events }

// Inventory is the default executor's: the machine the server runs on.
// Other executors' nodes are their pools' (see each executor).
func (r *Router) Inventory(ctx context.Context) (executor.Inventory, error) {
	return r.execs[r.def].Inventory(ctx)
}

// target returns the executor a launch names.
func (r *Router) target(l executor.Launch) (string, executor.Executor, error) {
	name := l.Executor
	if name == "" {
		name = r.def
	}
	ex, ok := r.execs[name]
	if !ok {
		return name, nil, fmt.Errorf("pool %q runs on executor %q, which this server does not configure (it has %s); add it to the server config's executors, or point the pool at one of those",
			l.Pool, name, strings.Join(r.names, ", "))
	}
	return name, ex, nil
}

// Launch starts the attempt on its pool's executor. Relaunching an
// attempt after a restart goes to the same executor, as its pool still
// names it.
func (r *Router) Launch(ctx context.Context, l executor.Launch) error {
	name, ex, err := r.target(l)
	if err != nil {
		return err
	}
	if max(l.Resources.Nodes, len(l.Placement.Nodes)) > 1 && !ex.Capabilities().MultiNode {
		return fmt.Errorf("pool %q runs on executor %q, which runs single-node jobs only; run multi-node jobs in a pool on a Kubernetes or Slurm executor", l.Pool, name)
	}
	r.mu.Lock()
	r.owner[l.Ref] = name
	r.mu.Unlock()
	return ex.Launch(ctx, l)
}

// owners returns the executor that launched ref, or every executor,
// the default first, when none did in this process (an attempt that
// ended before a restart).
func (r *Router) owners(ref executor.Ref) []executor.Executor {
	r.mu.Lock()
	name, ok := r.owner[ref]
	r.mu.Unlock()
	if ok {
		return []executor.Executor{r.execs[name]}
	}
	all := make([]executor.Executor, 0, len(r.names))
	for _, n := range r.names {
		all = append(all, r.execs[n])
	}
	return all
}

// Stop asks the attempt's executor to stop it. An attempt no executor
// launched in this process is asked of each, and one that says it does
// not know the attempt (domain.ErrNotFound) is skipped; the error is
// ErrNotFound only when none knows it.
func (r *Router) Stop(ctx context.Context, ref executor.Ref, req executor.StopRequest) error {
	owners := r.owners(ref)
	if len(owners) == 1 {
		return owners[0].Stop(ctx, ref, req)
	}
	var errs []error
	unknown := 0
	for _, ex := range owners {
		err := ex.Stop(ctx, ref, req)
		switch {
		case errors.Is(err, domain.ErrNotFound):
			unknown++
		case err != nil:
			errs = append(errs, err)
		}
	}
	if unknown == len(owners) {
		return fmt.Errorf("stop %s: no executor runs the attempt; call Launch first (it reattaches to a running attempt): %w", ref, domain.ErrNotFound)
	}
	return errors.Join(errs...)
}

// Release frees what the attempt's executor holds for it, and then
// forgets the attempt. An attempt no executor launched in this process is
// released on each: releasing one an executor never ran is no error.
func (r *Router) Release(ctx context.Context, ref executor.Ref) error {
	var errs []error
	for _, ex := range r.owners(ref) {
		if err := ex.Release(ctx, ref); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	r.mu.Lock()
	delete(r.owner, ref)
	r.mu.Unlock()
	return nil
}

// follower is an executor that reads an attempt's output sooner once
// someone follows its log (Kubernetes follows the pods' logs at once).
type follower interface {
	Following(ref executor.Ref)
}

// Logs reads the attempt's log through Files, first telling the executor
// that launched the attempt in this process, when it is a follower, that
// someone follows its log.
func (r *Router) Logs(ctx context.Context, ref executor.Ref, q executor.LogQuery, w io.Writer) error {
	if q.Follow {
		r.mu.Lock()
		name := r.owner[ref]
		r.mu.Unlock()
		if f, ok := r.execs[name].(follower); ok { // none for an attempt no executor here launched
			f.Following(ref)
		}
	}
	return r.Files.Logs(ctx, ref, q, w)
}

// waiter is an executor that can say why an attempt is not running yet.
type waiter interface {
	Waiting(ref executor.Ref) string
}

// Waiting says why the attempt is not running yet, when its executor can
// tell (a pod Kubernetes cannot place); "" otherwise.
func (r *Router) Waiting(ref executor.Ref) string {
	for _, ex := range r.owners(ref) {
		if w, ok := ex.(waiter); ok {
			if s := w.Waiting(ref); s != "" {
				return s
			}
		}
	}
	return ""
}
