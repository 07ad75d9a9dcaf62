package e2e

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/executor/executortest"
)

// twoProjects is server config with room for projects alpha and beta.
const twoProjects = `pools:
  - {name: default, nodes: [{name: n1, cpus: 4, memory: 8GiB}]}
quotas:
  - {project: alpha, pool: default, cpus: 2, memory: 4GiB}
  - {project: beta, pool: default, cpus: 2, memory: 4GiB}
`

// member creates a user who is a member of project, and returns its token.
func (s *server) member(name, project string) string {
	s.t.Helper()
	s.mustCLI("user", "create", name)
	s.mustCLI("role", "grant", name, "member", "--project", project)
	var tok apitypes.Token
	if err := json.Unmarshal([]byte(s.mustCLI("token", "create", "--user", name, "-o", "json")), &tok); err != nil || tok.Token == "" {
		s.t.Fatalf("token create: %+v %v", tok, err)
	}
	return tok.Token
}

// as runs f with the CLI and API acting as the holder of token.
func (s *server) as(token string, f func()) {
	saved := s.token
	s.token = token
	defer func() { s.token = saved }()
	f()
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// A member of project beta submits a job that tries every way out of its
// tree the platform has had: the server's token, config, keys and store,
// another project's running job, attempt directory and outputs, the data
// directory, a symlinked checkpoint marker, and output paths outside its
// own directory. Each attempt fails, the files are unchanged, and nothing
// is done as the admin.
func TestHostileJobCannotEscape(t *testing.T) {
	executortest.NeedRoot(t)
	s := startServer(t, serverOpts{cpus: 4, extra: twoProjects})
	if st := s.mustCLI("status"); !strings.Contains(st, "isolation: jobs run as per-project users") {
		t.Errorf("trainyard status does not say jobs are isolated:\n%s", st)
	}
	alice := s.member("alice", "alpha")
	mallory := s.member("mallory", "beta")
	shared := sharedDir(t)

	// Project alpha's job: a secret in its environment, outputs and a
	// checkpoint on disk, running while beta's job looks around.
	rnd := make([]byte, 12)
	rand.Read(rnd)
	alphaSecret := "alpha-" + hex.EncodeToString(rnd)
	var alpha apitypes.Job
	s.as(alice, func() {
		alpha = s.submit(fmt.Sprintf(`name: victim
project: alpha
env_vars: {ALPHA_MARK: %s}
entrypoint: 'echo model > $TRAINYARD_OUTPUT_DIR/result.txt; mkdir -p $TRAINYARD_CHECKPOINT_DIR/step-1 && echo w > $TRAINYARD_CHECKPOINT_DIR/step-1/weights && touch $TRAINYARD_CHECKPOINT_DIR/step-1/.complete; while [ ! -e %s/done ]; do sleep 0.05; done'
`, alphaSecret, shared))
	})
	s.waitState(alpha.ID, 30*time.Second, "running")
	alphaDir := s.job(alpha.ID).OutputDir
	waitFor(t, 10*time.Second, "alpha's outputs", func() bool {
		_, err := os.Stat(filepath.Join(alphaDir, "checkpoints", "step-1", ".complete"))
		return err == nil
	})

	// Files the hostile job must neither read nor change.
	precious := filepath.Join(shared, "precious")
	if err := os.WriteFile(precious, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cliConfig := filepath.Join(s.dir, "home", ".config", "trainyard", "config.yaml")
	guarded := []string{filepath.Join(s.data, "admin-token"), filepath.Join(s.data, "master.key"), cliConfig, precious,
		filepath.Join(alphaDir, "result.txt"), filepath.Join(alphaDir, "checkpoints", "step-1", "weights")}
	before := map[string]string{}
	for _, f := range guarded {
		before[f] = fileSum(t, f)
	}
	var head apitypes.AuditVerification
	s.api("GET", "/api/v1/audit/verify", nil, &head)
	lastSeq := head.LastSeq
	if lastSeq == 0 {
		t.Fatal("the audit log is empty before the hostile job; the check below would prove nothing")
	}

	data, runs := s.data, filepath.Join(s.data, "runs")
	alphaRun := filepath.Join(runs, strconv.FormatInt(alpha.ID, 10), "1")
	tries := []struct{ name, cmd string }{
		{"read the admin token", "cat " + data + "/admin-token"},
		{"read the CLI config", "cat " + cliConfig},
		{"read the master key", "cat " + data + "/master.key"},
		{"read the database", "head -c 100 " + data + "/trainyard.db"},
		{"write the database", "echo x >> " + data + "/trainyard.db"},
		{"list the data directory", "ls " + data},
		{"write into the data directory", "touch " + data + "/planted"},
		{"write into the runs directory", "touch " + runs + "/planted"},
		{"list the runs", "ls " + runs},
		{"read another attempt's log", "cat " + alphaRun + "/output.log"},
		{"list another attempt's work", "ls " + alphaRun + "/work"},
		{"read another attempt's exit record", "cat " + alphaRun + "/shim.pid"},
		{"read another project's outputs", "cat " + alphaDir + "/result.txt"},
		{"plant a checkpoint for another project", "mkdir " + alphaDir + "/checkpoints/step-9"},
		{"read another job's environment", "grep -l " + alphaSecret + " /proc/[0-9]*/environ"},
		{"read the code packages", "ls " + data + "/blobs"},
		{"gain root through a set-uid file", "test -u /bin/su && /bin/su -c true root </dev/null"},
	}
	var script strings.Builder
	for i, tr := range tries {
		fmt.Fprintf(&script, "if ( %s ) >/dev/null 2>&1; then echo 'try %d: ESCAPED'; else echo 'try %d: denied'; fi\n", tr.cmd, i, i)
	}
	// A checkpoint marker that points at a file of the server's: registering
	// the checkpoint must not write through it.
	fmt.Fprintf(&script, "mkdir -p $TRAINYARD_CHECKPOINT_DIR/x && echo w > $TRAINYARD_CHECKPOINT_DIR/x/weights && ln -s %s $TRAINYARD_CHECKPOINT_DIR/x/.complete\n", precious)
	fmt.Fprintf(&script, "ln -s %s $TRAINYARD_OUTPUT_DIR/stolen\n", filepath.Join(data, "admin-token"))
	fmt.Fprintf(&script, "ln -s %s $TRAINYARD_OUTPUT_DIR/alpha\n", alphaDir)
	specFile := filepath.Join(s.dir, "hostile.yaml")
	spec := fmt.Sprintf("name: hostile\nproject: beta\nentrypoint: [/bin/sh, -c, %q]\n", script.String())
	if err := os.WriteFile(specFile, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	var hostile apitypes.Job
	s.as(mallory, func() {
		hostile = s.submit(spec)
		// Output paths outside the job's own tree are refused at submit.
		for _, p := range []string{filepath.Join(runs, "{job_id}"), "/{job_id}", filepath.Join(alphaDir, "{job_id}"),
			filepath.Join(s.data, "artifacts", "alpha", "victim", "{job_id}")} {
			_, errOut, code := s.cli("submit", specFile, "--set", "outputs.path="+p)
			if code != 2 || !strings.Contains(errOut, "outputs.path") {
				t.Errorf("submit with outputs.path %s: exit %d, %q; want 2 naming outputs.path", p, code, errOut)
			}
		}
	})
	if j := s.waitState(hostile.ID, time.Minute, "succeeded", "failed"); j.State != "succeeded" {
		t.Fatalf("hostile job %s: %s\n%s", j.State, j.Message, s.mustCLI("logs", fmt.Sprint(hostile.ID)))
	}
	os.WriteFile(filepath.Join(shared, "done"), nil, 0o644)
	s.waitState(alpha.ID, 30*time.Second, "succeeded", "failed")

	logs := s.mustCLI("logs", fmt.Sprint(hostile.ID))
	for i, tr := range tries {
		switch {
		case strings.Contains(logs, fmt.Sprintf("try %d: ESCAPED", i)):
			t.Errorf("a job of project beta could %s", tr.name)
		case !strings.Contains(logs, fmt.Sprintf("try %d: denied", i)):
			t.Errorf("try %d (%s) did not run:\n%s", i, tr.name, logs)
		}
	}
	for _, f := range guarded {
		if got := fileSum(t, f); got != before[f] {
			t.Errorf("%s changed", f)
		}
	}
	for _, f := range []string{filepath.Join(s.data, "planted"), filepath.Join(runs, "planted"), filepath.Join(alphaDir, "checkpoints", "step-9")} {
		if _, err := os.Lstat(f); err == nil {
			t.Errorf("the hostile job created %s", f)
		}
	}

	// Its symlinks are not outputs: the manifest records regular files only,
	// and the symlinked marker made no checkpoint.
	waitFor(t, 30*time.Second, "the hostile job's outputs recorded", func() bool {
		_, _, code := s.cli("artifacts", "ls", fmt.Sprint(hostile.ID))
		return code == 0
	})
	arts := s.mustCLI("artifacts", "ls", fmt.Sprint(hostile.ID))
	if strings.Contains(arts, "stolen") || strings.Contains(arts, "alpha/") || strings.Contains(arts, "result.txt") {
		t.Errorf("the manifest records files through symlinks:\n%s", arts)
	}
	if out, _, _ := s.cli("checkpoints", "ls", fmt.Sprint(hostile.ID)); strings.Contains(out, " x ") || strings.HasPrefix(strings.TrimSpace(out), "x") {
		t.Errorf("a checkpoint with a symlinked marker was registered:\n%s", out)
	}

	// Nothing was done as the admin after beta's job started.
	var after apitypes.AuditList
	if code := s.api("GET", fmt.Sprintf("/api/v1/audit?actor=user:admin&after=%d&limit=500", lastSeq), nil, &after); code != 200 {
		t.Fatalf("read the audit log: status %d", code)
	}
	for _, r := range after.Records {
		t.Errorf("audit record %d was written as user:admin after beta's job started: %s %s", r.Seq, r.Action, r.Target)
	}
	s.as(mallory, func() {
		if who := s.mustCLI("whoami"); strings.Contains(who, "admin") {
			t.Errorf("mallory gained a role:\n%s", who)
		}
	})
}

// Twenty jobs with a secret run, fail, are cancelled, and outlive a kill -9
// of the server; afterwards no file of the data directory holds the secret
// value or any attempt's job token.
func TestNoSecretAtRest(t *testing.T) {
	executortest.NeedRoot(t)
	s := startServer(t, serverOpts{cpus: 8})
	shared := sharedDir(t)
	rnd := make([]byte, 16)
	rand.Read(rnd)
	value := "rest-" + hex.EncodeToString(rnd)
	if _, errOut, code := s.cliStdin(value+"\n", "secret", "set", "REST_KEY"); code != 0 {
		t.Fatalf("secret set: %s", errOut)
	}
	// Each job leaves its job token where the test can read it (outside the
	// data directory), then ends as its kind says.
	job := func(kind string, i int) int64 {
		var end string
		switch kind {
		case "ok":
			end = "exit 0"
		case "fail":
			end = "exit 3"
		case "cancel", "survive":
			end = fmt.Sprintf("while [ ! -e %s/go-%d ]; do sleep 0.05; done", shared, i)
		}
		spec := fmt.Sprintf("name: rest-%d\nresources: {cpus: 0.1}\nsecrets: [REST_KEY]\nentrypoint: 'printf %%s \"$TRAINYARD_JOB_TOKEN\" > %s/token-%d; echo \"key=$REST_KEY\"; %s'\n",
			i, shared, i, end)
		return s.submit(spec).ID
	}
	kinds := map[int64]string{}
	var ids []int64
	for i := range 20 {
		kind := []string{"ok", "fail", "cancel", "survive", "ok"}[i%5]
		id := job(kind, i)
		ids = append(ids, id)
		kinds[id] = kind
	}
	for i, id := range ids {
		switch kinds[id] {
		case "cancel", "survive":
			s.waitState(id, time.Minute, "running")
			waitFor(t, 30*time.Second, "the job's token", func() bool {
				_, err := os.Stat(filepath.Join(shared, fmt.Sprintf("token-%d", i)))
				return err == nil
			})
		}
	}
	for _, id := range ids {
		if kinds[id] == "cancel" {
			s.mustCLI("cancel", fmt.Sprint(id))
		}
	}
	s.kill9()
	for i, id := range ids {
		if kinds[id] == "survive" && i%2 == 0 {
			os.WriteFile(filepath.Join(shared, fmt.Sprintf("go-%d", i)), nil, 0o644) // ends while the server is down
		}
	}
	s.start()
	for i, id := range ids {
		if kinds[id] == "survive" {
			os.WriteFile(filepath.Join(shared, fmt.Sprintf("go-%d", i)), nil, 0o644)
		}
	}
	for _, id := range ids {
		s.waitState(id, time.Minute, "succeeded", "failed", "canceled")
	}
	// Outputs and logs are recorded after the attempts end; wait for the
	// last log line of every job, so every file the server writes exists.
	tokens := []string{value}
	for i := range ids {
		b, err := os.ReadFile(filepath.Join(shared, fmt.Sprintf("token-%d", i)))
		if err != nil || len(b) < 16 {
			t.Fatalf("job %d left no job token (%v)", i, err)
		}
		tokens = append(tokens, string(b))
	}
	s.shutdown()
	grepData(t, s.data, tokens...)
}
