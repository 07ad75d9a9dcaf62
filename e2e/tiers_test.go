package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"trainyard/internal/blob"
	blobs3 "trainyard/internal/blob/s3"
)

// s3URL returns an object store URL for one test, confined to a fresh
// prefix of the bucket TRAINYARD_TEST_S3 names, and a store to look into
// it. It skips without the variable, except under CI=true, where it
// fails.
func s3URL(t *testing.T) (string, blob.Store) {
	t.Helper()
	raw := os.Getenv("TRAINYARD_TEST_S3")
	if raw == "" {
		msg := "TRAINYARD_TEST_S3 is not set, so checkpoints on the object-store tier are not tested; start a local S3-compatible server with\n" +
			"\teval \"$(bash .ci/s3server.sh)\""
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("TRAINYARD_TEST_S3: %v", err)
	}
	var b [6]byte
	rand.Read(b[:])
	bucket, _, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	u.Path = "/" + bucket + "/e2e-tiers-" + hex.EncodeToString(b[:]) + "/"
	cfg, err := blobs3.ParseURL(u.String())
	if err != nil {
		t.Fatal(err)
	}
	bs, err := blobs3.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return u.String(), bs
}

func objects(t *testing.T, bs blob.Store, prefix string) []string {
	t.Helper()
	var keys []string
	for info, err := range bs.List(context.Background(), prefix) {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, strings.TrimPrefix(info.Key, prefix))
	}
	return keys
}

// A checkpoint the lifecycle policy moved to the object store is what
// the next attempt resumes from once its local copy is gone; checkpoints
// get streams it from the bucket meanwhile; and gc deletes it from the
// bucket when the policy says so.
func TestCheckpointMovedToTheObjectStoreIsResumedThenDeleted(t *testing.T) {
	store, bs := s3URL(t)
	s := startServer(t, serverOpts{extra: fmt.Sprintf("object_store: %q\ncheckpoint_lifecycle:\n  - {keep_local: 0}\n", store)})
	gate := filepath.Join(s.dir, "go")
	// Attempt 1 saves step-1 and waits for the test; attempt 2 reads what
	// it is handed to resume from.
	job := s.submit(fmt.Sprintf(`name: tiered
entrypoint: [sh, -c, 'if [ "$TRAINYARD_ATTEMPT" = 1 ]; then mkdir -p $TRAINYARD_CHECKPOINT_DIR/step-1/opt && echo "trained 100 steps" > $TRAINYARD_CHECKPOINT_DIR/step-1/model && echo adam > $TRAINYARD_CHECKPOINT_DIR/step-1/opt/state && touch $TRAINYARD_CHECKPOINT_DIR/step-1/.complete; while [ ! -f %s ]; do sleep 0.05; done; exit 1; fi; cat "$TRAINYARD_RESUME_FROM/model" > $TRAINYARD_OUTPUT_DIR/resumed.txt']
policy: {retries: 1, reentrant: true}
`, gate))
	id := strconv.FormatInt(job.ID, 10)
	type ck struct{ Name, Tier string }
	list := func() []ck {
		var l struct{ Checkpoints []ck }
		out, _, _ := s.cli("checkpoints", "ls", id, "-o", "json")
		json.Unmarshal([]byte(out), &l)
		return l.Checkpoints
	}
	waitFor(t, 30*time.Second, "step-1 registered", func() bool { l := list(); return len(l) == 1 && l[0].Tier == "local" })

	var dry struct {
		Deletions []struct{ Kind, Path string }
	}
	if err := json.Unmarshal([]byte(s.mustCLI("gc", "--dry-run", "-o", "json")), &dry); err != nil {
		t.Fatal(err)
	}
	if len(dry.Deletions) != 1 || dry.Deletions[0].Kind != "move" || dry.Deletions[0].Path != "step-1" {
		t.Fatalf("gc --dry-run plans %+v, want step-1 moved", dry.Deletions)
	}
	if out := s.mustCLI("gc"); !strings.Contains(out, "move") {
		t.Fatalf("gc did not move step-1:\n%s", out)
	}
	outDir := s.job(job.ID).OutputDir
	if _, err := os.Lstat(filepath.Join(outDir, "checkpoints", "step-1")); !os.IsNotExist(err) {
		t.Fatalf("the local copy of a moved checkpoint is still there: %v", err)
	}
	if l := list(); len(l) != 1 || l[0].Tier != "object" {
		t.Fatalf("after the move checkpoints ls says %+v, want step-1 on the object tier", l)
	}
	prefix := "checkpoints/" + id + "/step-1/"
	if got := objects(t, bs, prefix); strings.Join(got, ",") != ".complete,model,opt/state" {
		t.Fatalf("the bucket holds %v", got)
	}
	if !strings.Contains(s.mustCLI("audit", "ls", "--action", "artifact.gc"), "moved to the object store") {
		t.Errorf("the move is not audited")
	}
	dest := filepath.Join(s.dir, "dl")
	s.mustCLI("checkpoints", "get", id, "step-1", "--dest", dest)
	if b, err := os.ReadFile(filepath.Join(dest, "step-1", "opt", "state")); err != nil || string(b) != "adam\n" {
		t.Fatalf("checkpoints get from the bucket: %q, %v", b, err)
	}

	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if j := s.waitState(job.ID, 60*time.Second, "succeeded", "failed"); j.State != "succeeded" {
		logs, _, _ := s.cli("logs", "--attempt", "2", id)
		t.Fatalf("job %s: %s\n%s", j.State, j.Message, logs)
	}
	if b, err := os.ReadFile(filepath.Join(outDir, "resumed.txt")); err != nil || string(b) != "trained 100 steps\n" {
		t.Fatalf("attempt 2 read %q from its resumed checkpoint (%v); want attempt 1's", b, err)
	}
	if l := list(); len(l) != 1 || l[0].Tier != "both" {
		t.Fatalf("after the restore checkpoints ls says %+v, want step-1 on both tiers", l)
	}

	// The policy now deletes checkpoints a few seconds from now: after
	// the pass the server makes when it starts, so that gc is what finds
	// it due.
	var l struct{ Checkpoints []struct{ At time.Time } }
	out, _, _ := s.cli("checkpoints", "ls", id, "-o", "json")
	if err := json.Unmarshal([]byte(out), &l); err != nil || len(l.Checkpoints) != 1 {
		t.Fatalf("checkpoints ls: %s, %v", out, err)
	}
	age := time.Since(l.Checkpoints[0].At) + 3*time.Second
	s.shutdown()
	cfg, _ := os.ReadFile(s.config)
	after := fmt.Sprintf("{delete_after: %dms}", age.Milliseconds())
	os.WriteFile(s.config, []byte(strings.Replace(string(cfg), "{keep_local: 0}", after, 1)), 0o644)
	s.start()
	waitFor(t, 30*time.Second, "gc --dry-run to plan the deletion", func() bool {
		return strings.Contains(s.mustCLI("gc", "--dry-run"), "step-1")
	})
	if len(list()) != 1 {
		t.Fatalf("step-1 was deleted before gc ran")
	}
	if out := s.mustCLI("gc"); !strings.Contains(out, "step-1") || !strings.Contains(out, "removed 1 item") {
		t.Fatalf("gc did not delete step-1:\n%s", out)
	}
	if got := objects(t, bs, prefix); len(got) != 0 {
		t.Fatalf("gc left %v in the bucket", got)
	}
	if l := list(); len(l) != 0 {
		t.Fatalf("after gc checkpoints ls says %+v", l)
	}
	if _, err := os.Lstat(filepath.Join(outDir, "checkpoints", "step-1")); !os.IsNotExist(err) {
		t.Fatalf("the local copy is still there after gc: %v", err)
	}
}
