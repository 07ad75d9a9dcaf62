package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// gc --dry-run lists exactly what the following real gc deletes; models
// stay; every deletion is audited.
func TestGCDryRunMatchesRealRun(t *testing.T) {
	s := startServer(t, serverOpts{extra: "retention:\n  - {checkpoints: 1ms, reports: 1ms}\n"})
	job := s.submit(`name: gc-me
entrypoint: [sh, -c, 'cd $TRAINYARD_OUTPUT_DIR && mkdir -p eval models $TRAINYARD_CHECKPOINT_DIR/step-1 && echo w > models/final.pt && echo acc > eval/report.txt && echo s > $TRAINYARD_CHECKPOINT_DIR/step-1/state && touch $TRAINYARD_CHECKPOINT_DIR/step-1/.complete && echo c > $TRAINYARD_CHECKPOINT_DIR/step-2.json && touch $TRAINYARD_CHECKPOINT_DIR/step-2.json.complete']
`)
	if j := s.waitState(job.ID, 30*time.Second, "succeeded", "failed"); j.State != "succeeded" {
		t.Fatalf("job %s: %s", j.State, j.Message)
	}
	id := fmt.Sprint(job.ID)
	waitFor(t, 20*time.Second, "the manifest", func() bool { _, _, code := s.cli("artifacts", "ls", id); return code == 0 })

	type report struct {
		DryRun    bool `json:"dry_run"`
		Deletions []struct {
			Job        int64
			Kind, Path string
		}
	}
	var dry, real report
	if err := json.Unmarshal([]byte(s.mustCLI("gc", "--dry-run", "-o", "json")), &dry); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, d := range dry.Deletions {
		paths = append(paths, d.Kind+":"+d.Path)
	}
	if want := "checkpoint:step-1,checkpoint:step-2.json,output:eval/report.txt"; strings.Join(paths, ",") != want || !dry.DryRun {
		t.Fatalf("dry run lists %v, want %s", paths, want)
	}
	out := s.job(job.ID).OutputDir
	if _, err := os.Stat(filepath.Join(out, "eval", "report.txt")); err != nil {
		t.Fatalf("the dry run removed something: %v", err)
	}
	if err := json.Unmarshal([]byte(s.mustCLI("gc", "-o", "json")), &real); err != nil {
		t.Fatal(err)
	}
	if real.DryRun || !reflect.DeepEqual(real.Deletions, dry.Deletions) {
		t.Fatalf("gc removed %+v; the dry run said %+v", real.Deletions, dry.Deletions)
	}
	for _, p := range []string{"eval/report.txt", "checkpoints/step-1", "checkpoints/step-2.json", "checkpoints/step-2.json.complete"} {
		if _, err := os.Stat(filepath.Join(out, p)); !os.IsNotExist(err) {
			t.Errorf("%s still exists after gc (%v)", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "models", "final.pt")); err != nil {
		t.Errorf("gc removed the model: %v", err)
	}
	audit := s.mustCLI("audit", "ls", "--action", "artifact.gc")
	if n := strings.Count(audit, "artifact.gc"); n != 3 {
		t.Errorf("audit shows %d gc removals, want 3:\n%s", n, audit)
	}
	if again := s.mustCLI("gc", "--dry-run"); !strings.Contains(again, "would remove 0 item(s)") {
		t.Errorf("a second dry run: %s", again)
	}
}
