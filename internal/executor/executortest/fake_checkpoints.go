package executortest

import (
	"context"
	"path"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

// How the Fake plays an in-job agent's checkpoint work, as the local
// executor's shim does: before a Program starts it picks the first
// checkpoint of Launch.Resume that is complete and whose digest matches
// (TRAINYARD_RESUME_FROM, Started's Resumed and ResumeNote), and a
// checkpoint step that completes a checkpoint reports it as a
// Checkpointed event with its digest.

// resume returns l with TRAINYARD_RESUME_FROM set from l.Resume, and the
// name handed over and why others were skipped.
func (f *Fake) resume(l executor.Launch) (executor.Launch, string, string) {
	if l.CheckpointDir == "" {
		l.CheckpointDir, _ = getenv(l.Env, "TRAINYARD_CHECKPOINT_DIR")
	}
	if len(l.Resume) == 0 || l.CheckpointDir == "" {
		return l, "", ""
	}
	o, err := f.Outputs(context.Background(), path.Dir(l.CheckpointDir))
	if err == nil {
		defer o.Close()
	}
	got, ok, skipped := executor.PickResume(context.Background(), o, l.Resume)
	chosen, from := "", ""
	if ok {
		chosen, from = got.Name, path.Join(l.CheckpointDir, got.Name)
	}
	env := make([]string, 0, len(l.Env)+1)
	for _, kv := range l.Env {
		if !strings.HasPrefix(kv, "TRAINYARD_RESUME_FROM=") {
			env = append(env, kv)
		}
	}
	l.Env = append(env, "TRAINYARD_RESUME_FROM="+from)
	return l, chosen, strings.Join(skipped, "; ")
}

// checkpointed reports checkpoint name below l.CheckpointDir as the
// agent would once the job completed it.
func (f *Fake) checkpointed(l executor.Launch, name string) {
	dir := l.CheckpointDir
	if dir == "" {
		dir, _ = getenv(l.Env, "TRAINYARD_CHECKPOINT_DIR")
	}
	if dir == "" {
		return
	}
	o, err := f.Outputs(context.Background(), path.Dir(dir))
	if err != nil {
		return
	}
	defer o.Close()
	c, err := o.Digest(context.Background(), name)
	if err != nil {
		return // not complete: nothing to register
	}
	f.Emit(executor.Event{Ref: l.Ref, Kind: executor.Checkpointed, At: time.Now().UTC(), Checkpoint: &c})
}

// sealOutputs reports the job's outputs as an agent records them when an
// attempt that ran ends: read-only first if it succeeded, then their
// manifest (OutputsSealed).
func (f *Fake) sealOutputs(l executor.Launch, state domain.AttemptState) {
	dir := l.OutputDir
	if dir == "" {
		dir, _ = getenv(l.Env, "TRAINYARD_OUTPUT_DIR")
	}
	if dir == "" {
		return
	}
	ctx := context.Background()
	o, err := f.Outputs(ctx, dir)
	if err != nil {
		return
	}
	defer o.Close()
	sealed, err := executor.Seal(ctx, o, state == domain.AttemptSucceeded)
	if err != nil {
		return
	}
	f.Emit(executor.Event{Ref: l.Ref, Kind: executor.OutputsSealed, At: time.Now().UTC(), Outputs: &sealed})
}
