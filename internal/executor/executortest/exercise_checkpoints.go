package executortest

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

// TorchSave returns a small zip archive laid out as torch.save (PyTorch
// 1.6 and later) writes one: a whole one is a complete checkpoint file.
func TorchSave() []byte {
	var b bytes.Buffer
	w := zip.NewWriter(&b)
	for _, e := range [][2]string{{"archive/data.pkl", "\x80\x02}q\x00."}, {"archive/data/0", strings.Repeat("\x00\x01", 32)}, {"archive/version", "3\n"}} {
		f, err := w.CreateHeader(&zip.FileHeader{Name: e[0], Method: zip.Store})
		if err != nil {
			panic(err)
		}
		f.Write([]byte(e[1]))
	}
	if err := w.Close(); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// exerciseCheckpoints checks the rules of domain.CheckpointMarker through
// Outputs: what is complete and what not (and why), Digest, and marking a
// file complete, with links planted where markers, trainer states and
// checkpoints go.
func exerciseCheckpoints(t *testing.T, newExec func(t *testing.T) executor.Executor) {
	ctx := context.Background()
	h := NewHarness(t, newExec(t))
	z := TorchSave()
	l := h.Run(t, Program{Steps: []Step{
		{Checkpoint: &CheckpointStep{Name: "hparams.yaml", File: true, Data: []byte("lr: 1\n")}},
		{Checkpoint: &CheckpointStep{Name: "model.bin", File: true, Data: []byte("weights"), Complete: true}},
		{Checkpoint: &CheckpointStep{Name: "epoch=1.ckpt", File: true, Data: z}},
		{Checkpoint: &CheckpointStep{Name: "cut.pt", File: true, Data: z[:len(z)-1]}},
		{Checkpoint: &CheckpointStep{Name: "checkpoint-500", Files: map[string]string{"model.safetensors": "w5", domain.HFTrainerState: "{}"}}},
		{Checkpoint: &CheckpointStep{Name: "checkpoint-600", Files: map[string]string{"model.safetensors": "w6"}}},
		{Checkpoint: &CheckpointStep{Name: "step-1", Files: map[string]string{"a/x": "1", "a.txt": "22", "a-b": "333"}, Complete: true}},
		{Checkpoint: &CheckpointStep{Name: "half.ckpt.tmp", File: true, Data: z[:10]}},
		// A hostile job: links where a marker, a trainer state and a
		// checkpoint go, each to a regular file that would count.
		{Checkpoint: &CheckpointStep{Name: "linked.bin", File: true, Data: []byte("l")}},
		{Link: []string{"checkpoints/linked.bin" + domain.CheckpointMarker, "model.bin"}},
		{Checkpoint: &CheckpointStep{Name: "checkpoint-700", Files: map[string]string{"w": "7"}}},
		{Link: []string{"checkpoints/checkpoint-700/" + domain.HFTrainerState, "../model.bin"}},
		{Checkpoint: &CheckpointStep{Name: "ld", Files: map[string]string{"w": "d"}}},
		{Link: []string{"checkpoints/ld/" + domain.CheckpointMarker, "../model.bin" + domain.CheckpointMarker}},
		{Link: []string{"checkpoints/alias.ckpt", "epoch=1.ckpt"}},
	}}, nil)
	h.Wait(t, l.Ref, executor.Exited)
	o := h.Outputs(t, l)
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	line := func(data, rel string) string { return fmt.Sprintf("%s  %d  %s\n", sum([]byte(data)), len(data), rel) }

	// Markers, .tmp names and links are not listed.
	checkCheckpoints(t, o, map[string]executor.Checkpoint{
		"hparams.yaml":   {Name: "hparams.yaml", Complete: false, Size: 6, Files: 1},
		"model.bin":      {Name: "model.bin", Complete: true, Size: 7, Files: 1},
		"epoch=1.ckpt":   {Name: "epoch=1.ckpt", Complete: true, Size: int64(len(z)), Files: 1},
		"cut.pt":         {Name: "cut.pt", Complete: false, Size: int64(len(z) - 1), Files: 1},
		"checkpoint-500": {Name: "checkpoint-500", Complete: true, Size: 4, Files: 2},
		"checkpoint-600": {Name: "checkpoint-600", Complete: false, Size: 2, Files: 1},
		"step-1":         {Name: "step-1", Complete: true, Size: 6, Files: 4},
		"linked.bin":     {Name: "linked.bin", Complete: false, Size: 1, Files: 1},
		"checkpoint-700": {Name: "checkpoint-700", Complete: false, Size: 1, Files: 1},
		"ld":             {Name: "ld", Complete: false, Size: 1, Files: 1},
	})
	files := map[string]bool{"hparams.yaml": true, "cut.pt": true, "linked.bin": true}
	cs, _ := o.Checkpoints(ctx)
	listing := map[string]executor.Checkpoint{}
	for _, c := range cs {
		listing[c.Name] = c
		if c.Complete {
			continue
		}
		// What would make it complete: a marker beside a file, inside a
		// directory.
		want := domain.CheckpointMarker
		if files[c.Name] {
			want = c.Name + domain.CheckpointMarker
		}
		if !strings.Contains(c.Why, want) {
			t.Errorf("checkpoint %s: why %q, want it to name %s", c.Name, c.Why, want)
		}
	}

	for name, want := range map[string]string{
		"model.bin":      sum([]byte("weights")),
		"epoch=1.ckpt":   sum(z),
		"checkpoint-500": sum([]byte(line("w5", "model.safetensors") + line("{}", domain.HFTrainerState))),
		// Paths in lexical order (a-b < a.txt < a/x), the marker left out.
		"step-1": sum([]byte(line("333", "a-b") + line("22", "a.txt") + line("1", "a/x"))),
	} {
		c, err := o.Digest(ctx, name)
		lc := listing[name]
		if err != nil || c.SHA256 != want || c.Name != name || !c.Complete || c.Size != lc.Size || c.Files != lc.Files || c.Location == "" || !c.ModTime.Equal(lc.ModTime) {
			t.Errorf("Digest(%s) = %+v, %v; want sha256 %s and the listing's size, files, location and time %+v", name, c, err, want, lc)
		}
	}
	for _, name := range []string{"hparams.yaml", "cut.pt", "checkpoint-600", "linked.bin", "checkpoint-700", "ld"} {
		if c, err := o.Digest(ctx, name); !errors.Is(err, executor.ErrIncomplete) {
			t.Errorf("Digest(%s) = %+v, %v; want an error matching ErrIncomplete", name, c, err)
		}
	}
	if _, err := o.Digest(ctx, "nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Digest(nope) = %v, want an error matching fs.ErrNotExist", err)
	}
	for _, name := range []string{"alias.ckpt", "../sub", "step-1/a", ""} {
		if c, err := o.Digest(ctx, name); err == nil {
			t.Errorf("Digest(%q) = %+v, want an error", name, c)
		}
	}

	// A file marked complete gets NAME.complete beside it, a regular file
	// of the outputs that is not listed as a checkpoint; it is completed
	// last, so it is the newest.
	for _, name := range []string{"hparams.yaml", "hparams.yaml", "model.bin"} {
		if err := o.MarkComplete(ctx, name); err != nil {
			t.Errorf("MarkComplete(%s): %v", name, err)
		}
	}
	for _, name := range []string{"linked.bin", "ld", "alias.ckpt", "nope", "../sub"} {
		if err := o.MarkComplete(ctx, name); err == nil {
			t.Errorf("MarkComplete(%s) succeeded, want an error (a link, or no checkpoint)", name)
		}
	}
	ReadOutput(t, o, executor.CheckpointsDir+"/hparams.yaml"+domain.CheckpointMarker)
	cs, err := o.Checkpoints(ctx)
	if err != nil || len(cs) == 0 || cs[len(cs)-1].Name != "hparams.yaml" || !cs[len(cs)-1].Complete || cs[len(cs)-1].Why != "" {
		t.Errorf("Checkpoints after MarkComplete(hparams.yaml) = %+v, %v; want it complete and last", cs, err)
	}
	if c, err := o.Digest(ctx, "hparams.yaml"); err != nil || c.SHA256 != sum([]byte("lr: 1\n")) || c.Size != 6 || c.Files != 1 {
		t.Errorf("Digest(hparams.yaml) = %+v, %v; want the sha256 of its 6 bytes", c, err)
	}
	if b := ReadOutput(t, o, executor.CheckpointsDir+"/model.bin"); b != "weights" {
		t.Errorf("model.bin holds %q after MarkComplete", b)
	}
}

// exerciseCheckpointEvents checks the in-job agent's part: every
// checkpoint an attempt completes is reported, with its digest, before
// its Exited event (and nothing else in the checkpoint directory is), and
// a later attempt is handed the first checkpoint of Launch.Resume whose
// digest still matches, skipping (and saying why) those that do not.
func exerciseCheckpointEvents(t *testing.T, newExec func(t *testing.T) executor.Executor) {
	ctx := context.Background()
	h := NewHarness(t, newExec(t))
	l1 := h.Run(t, Program{Steps: []Step{
		{Checkpoint: &CheckpointStep{Name: "step-1", Files: map[string]string{"w": "1", "opt/s": "adam"}, Complete: true}},
		{Checkpoint: &CheckpointStep{Name: "step-2.pt", File: true, Data: TorchSave()}},
		{Checkpoint: &CheckpointStep{Name: "notes.txt", File: true, Data: []byte("not a checkpoint")}},
		{Checkpoint: &CheckpointStep{Name: "step-3.pt", File: true, Data: TorchSave()[:40]}}, // cut short
	}}, nil)
	h.Wait(t, l1.Ref, executor.Exited)
	o := h.Outputs(t, l1)
	got := map[string]string{}
	ended := false
	for _, ev := range h.Events(l1.Ref) {
		switch ev.Kind {
		case executor.Exited:
			ended = true
		case executor.Checkpointed:
			if ended {
				t.Errorf("Checkpointed %s after Exited", ev.Checkpoint.Name)
			}
			if ev.Checkpoint == nil || !ev.Checkpoint.Complete {
				t.Fatalf("Checkpointed event without a complete checkpoint: %+v", ev)
			}
			got[ev.Checkpoint.Name] = ev.Checkpoint.SHA256
		}
	}
	want := map[string]string{}
	for _, name := range []string{"step-1", "step-2.pt"} {
		d, err := o.Digest(ctx, name)
		if err != nil {
			t.Fatalf("Digest(%s): %v", name, err)
		}
		want[name] = d.SHA256
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Checkpointed %v, want %v (complete ones only, with their digests)", got, want)
	}

	// Attempt 2 of the same job: the newest is changed since it was
	// registered (its digest does not match), one is gone; step-1 is
	// handed over.
	ckpt, _ := getenv(l1.Env, "TRAINYARD_CHECKPOINT_DIR")
	out, _ := getenv(l1.Env, "TRAINYARD_OUTPUT_DIR")
	l2 := h.Run(t, Program{Steps: []Step{{PrintEnv: true}}}, func(l *executor.Launch) {
		l.Ref = executor.Ref{JobID: l1.JobID, Attempt: 2}
		l.Env = append(l.Env, "TRAINYARD_OUTPUT_DIR="+out, "TRAINYARD_CHECKPOINT_DIR="+ckpt)
		l.Writable = []string{out, ckpt}
		l.CheckpointDir = ckpt
		l.Resume = []executor.ResumeFrom{{Name: "step-2.pt", SHA256: strings.Repeat("0", 64)}, {Name: "gone"}, {Name: "step-1", SHA256: want["step-1"]}}
	})
	started := h.Wait(t, l2.Ref, executor.Started)
	if started.Resumed != "step-1" || !strings.Contains(started.ResumeNote, "step-2.pt") || !strings.Contains(started.ResumeNote, "gone") {
		t.Errorf("Started: Resumed %q, ResumeNote %q; want step-1, naming step-2.pt and gone as skipped", started.Resumed, started.ResumeNote)
	}
	h.Wait(t, l2.Ref, executor.Exited)
	lines := h.LogLines(t, l2.Ref, executor.LogQuery{})
	if wantEnv := "TRAINYARD_RESUME_FROM=" + ckpt + "/step-1"; !slices.Contains(lines, wantEnv) {
		t.Errorf("attempt 2's environment lacks %s:\n%s", wantEnv, strings.Join(lines, "\n"))
	}

	// Nothing intact to resume from: the variable is empty.
	l3 := h.Run(t, Program{Steps: []Step{{PrintEnv: true}}}, func(l *executor.Launch) {
		l.Ref = executor.Ref{JobID: l1.JobID, Attempt: 3}
		l.Env = append(l.Env, "TRAINYARD_OUTPUT_DIR="+out, "TRAINYARD_CHECKPOINT_DIR="+ckpt, "TRAINYARD_RESUME_FROM=stale")
		l.Writable = []string{out, ckpt}
		l.CheckpointDir = ckpt
		l.Resume = []executor.ResumeFrom{{Name: "step-3.pt"}}
	})
	if s := h.Wait(t, l3.Ref, executor.Started); s.Resumed != "" || !strings.Contains(s.ResumeNote, "step-3.pt") {
		t.Errorf("Started: Resumed %q, ResumeNote %q; want none, naming the cut-short step-3.pt", s.Resumed, s.ResumeNote)
	}
	h.Wait(t, l3.Ref, executor.Exited)
	if lines := h.LogLines(t, l3.Ref, executor.LogQuery{}); !slices.Contains(lines, "TRAINYARD_RESUME_FROM=") {
		t.Errorf("attempt 3 was handed something to resume from:\n%s", strings.Join(lines, "\n"))
	}
}

// exerciseOutputsSealed checks that an attempt's agent records the job's
// outputs when it ends, after its checkpoints and before Exited: their
// manifest without the checkpoint directory, read-only when it succeeded.
func exerciseOutputsSealed(t *testing.T, newExec func(t *testing.T) executor.Executor) {
	ctx := context.Background()
	for _, tc := range []struct {
		exit     int
		readOnly bool
	}{{0, true}, {1, false}} {
		h := NewHarness(t, newExec(t))
		l := h.Run(t, Program{Exit: tc.exit, Steps: []Step{
			{File: &FileStep{Path: "model.bin", Data: "weights"}},
			{File: &FileStep{Path: "eval/report.txt", Data: "acc=0.9"}},
			{Checkpoint: &CheckpointStep{Name: "step-1", Files: map[string]string{"w": "1"}, Complete: true}},
		}}, nil)
		h.Wait(t, l.Ref, executor.Exited)
		var sealed *executor.SealedOutputs
		last := -1
		for i, ev := range h.Events(l.Ref) {
			switch ev.Kind {
			case executor.OutputsSealed:
				if sealed != nil {
					t.Errorf("exit %d: OutputsSealed twice", tc.exit)
				}
				sealed = ev.Outputs
				if last >= 0 {
					t.Errorf("exit %d: OutputsSealed after Exited", tc.exit)
				}
			case executor.Checkpointed:
				if sealed != nil {
					t.Errorf("exit %d: Checkpointed after OutputsSealed", tc.exit)
				}
			case executor.Exited:
				last = i
			}
		}
		if sealed == nil {
			t.Fatalf("exit %d: no OutputsSealed event", tc.exit)
		}
		want, err := h.Outputs(t, l).Manifest(ctx, executor.CheckpointsDir)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) != 2 || fmt.Sprint(sealed.Files) != fmt.Sprint(want) || sealed.ReadOnly != tc.readOnly {
			t.Errorf("exit %d: sealed %+v, want files %+v (model.bin, eval/report.txt), read-only %v", tc.exit, sealed, want, tc.readOnly)
		}
	}
}
