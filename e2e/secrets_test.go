package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

// cliStdin runs the CLI with stdin and returns stdout, stderr and the exit
// code.
func (s *server) cliStdin(stdin string, args ...string) (string, string, int) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = s.env()
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		s.t.Fatalf("run trainyard %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// rawAPI calls the API with the admin token and returns the status and the
// raw body.
func (s *server) rawAPI(method, path string, body any) (int, string) {
	s.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.url+path, r)
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.http.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s + "\n"))
	return hex.EncodeToString(sum[:])
}

// secretJob prints its secret whole, in two writes of one line, on stderr,
// and its SHA-256 (so the test knows the process got the value).
const secretJob = `name: %s
secrets: [E2E_TOKEN]
entrypoint: |
  echo "token=$E2E_TOKEN"
  a=${E2E_TOKEN%%????????}; b=${E2E_TOKEN#"$a"}
  printf 'split=%%s' "$a"; sleep 0.3; printf '%%s\n' "$b"
  echo "$E2E_TOKEN" >&2
  echo "sha=$(echo "$E2E_TOKEN" | sha256sum | cut -d' ' -f1)"
`

// TestSecretNeverShown: a job gets its secret as an environment variable,
// and the value shows up in no log, job view, API answer, error, server log
// or audit record.
func TestSecretNeverShown(t *testing.T) {
	s := startServer(t, serverOpts{})
	rnd := make([]byte, 12)
	rand.Read(rnd)
	value := "e2e-" + hex.EncodeToString(rnd)
	var seen []string // everything the value must not appear in: "what\x00text"
	look := func(what, text string) { seen = append(seen, what+"\x00"+text) }

	// Unknown secret: refused at submit with the way to create it.
	spec := filepath.Join(s.dir, "job.yaml")
	os.WriteFile(spec, []byte(fmt.Sprintf(secretJob, "with-secret")), 0o644)
	out, errOut, code := s.cli("submit", spec)
	if code != 2 || !strings.Contains(errOut, "secrets[0]") || !strings.Contains(errOut, "trainyard secret set E2E_TOKEN") {
		t.Fatalf("submit naming a missing secret: exit %d, stderr %q; want 2 with secrets[0] and how to create it", code, errOut)
	}

	// Too short, bad name: refused, and the body's value is not echoed.
	if _, errOut, code := s.cliStdin("abc\n", "secret", "set", "E2E_TOKEN"); code != 2 || !strings.Contains(errOut, "at least 4") {
		t.Errorf("secret set with a 3-byte value: exit %d, %q; want 2 saying at least 4 bytes", code, errOut)
	}
	status, body := s.rawAPI("PUT", "/api/v1/secrets/bad-name", apitypes.SecretValue{Value: value})
	if status != 400 {
		t.Errorf("PUT a bad secret name: status %d, want 400", status)
	}
	look("error answer of a bad set", body)

	// Set (value on stdin, trailing newline stripped), then set again.
	out, errOut = s.mustCLIStdin(value+"\n", "secret", "set", "E2E_TOKEN")
	look("secret set output", out+errOut)
	if !strings.Contains(errOut, "version 1") {
		t.Errorf("secret set: %q, want version 1", errOut)
	}
	out, errOut = s.mustCLIStdin(value+"\n", "secret", "set", "E2E_TOKEN")
	look("secret set output", out+errOut)
	if !strings.Contains(errOut, "version 2") {
		t.Errorf("second secret set: %q, want version 2", errOut)
	}
	ls := s.mustCLI("secret", "ls")
	look("secret ls", ls)
	if !strings.Contains(ls, "E2E_TOKEN") {
		t.Errorf("secret ls lacks the secret:\n%s", ls)
	}
	lsJSON := s.mustCLI("secret", "ls", "-o", "json")
	look("secret ls -o json", lsJSON)

	// The job runs with the value and prints it every way it can.
	out = s.mustCLI("submit", spec)
	look("submit output", out)
	var id int64
	fmt.Sscan(strings.TrimSpace(out), &id)
	job := s.waitState(id, 60*time.Second, "succeeded", "failed")
	if job.State != "succeeded" {
		logs, _, _ := s.cli("logs", fmt.Sprint(id))
		t.Fatalf("job %d %s: %s\n%s", id, job.State, job.Message, logs)
	}
	logs := s.mustCLI("logs", fmt.Sprint(id))
	look("trainyard logs", logs)
	for _, want := range []string{"token=[redacted]", "split=[redacted]", "[redacted]\n", "sha=" + sha(value)} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	look("trainyard logs --timestamps", s.mustCLI("logs", "--timestamps", fmt.Sprint(id)))
	look("trainyard show -o json", s.mustCLI("show", "-o", "json", fmt.Sprint(id)))
	look("trainyard show", s.mustCLI("show", fmt.Sprint(id)))
	look("trainyard why", s.mustCLI("why", fmt.Sprint(id)))
	for _, path := range []string{
		fmt.Sprintf("/api/v1/jobs/%d", id), fmt.Sprintf("/api/v1/jobs/%d/why", id),
		fmt.Sprintf("/api/v1/jobs/%d/logs?timestamps=true", id), "/api/v1/jobs", "/api/v1/secrets",
		"/api/v1/secrets?project=default",
	} {
		status, body := s.rawAPI("GET", path, nil)
		if status != 200 {
			t.Errorf("GET %s: status %d", path, status)
		}
		look("GET "+path, body)
	}
	raw, _ := filepath.Glob(filepath.Join(s.data, "runs", "*", "*", "*.log"))
	for _, f := range raw {
		b, _ := os.ReadFile(f)
		look("log file "+f, string(b))
	}
	// The value reached the job through a pipe: no file the server or the
	// supervisor wrote holds it, nor the store's files.
	grepData(t, s.data, value)

	// Rotation: a group-readable key is refused; a private one re-encrypts
	// everything, and jobs still get the value, also after a restart with
	// the new key configured.
	loose := filepath.Join(s.dir, "loose.key")
	os.WriteFile(loose, bytes.Repeat([]byte{7}, 32), 0o640)
	os.Chmod(loose, 0o640)
	if _, errOut, code := s.cli("secret", "rotate-key", "--new-key-file", loose); code == 0 || !strings.Contains(errOut, "chmod 600") {
		t.Errorf("rotate-key to a group-readable key: exit %d, %q; want a refusal saying chmod 600", code, errOut)
	}
	newKey := filepath.Join(s.dir, "master-2.key")
	keyBytes := make([]byte, 32)
	rand.Read(keyBytes)
	os.WriteFile(newKey, keyBytes, 0o600)
	out = s.mustCLI("secret", "rotate-key", "--new-key-file", newKey)
	if !strings.Contains(out, "re-encrypted 2 secret version(s)") {
		t.Errorf("rotate-key: %q, want 2 versions re-encrypted", out)
	}
	cfg, _ := os.ReadFile(s.config)
	os.WriteFile(s.config, append(cfg, []byte("master_key_file: "+newKey+"\n")...), 0o644)
	look("server stderr before restart", s.stderrText())
	s.shutdown()
	s.start()
	os.WriteFile(spec, []byte(fmt.Sprintf(secretJob, "after-rotation")), 0o644)
	out = s.mustCLI("submit", spec)
	fmt.Sscan(strings.TrimSpace(out), &id)
	if job := s.waitState(id, 60*time.Second, "succeeded", "failed"); job.State != "succeeded" {
		t.Fatalf("job after rotation %s: %s", job.State, job.Message)
	}
	logs = s.mustCLI("logs", fmt.Sprint(id))
	look("logs after rotation", logs)
	if !strings.Contains(logs, "sha="+sha(value)) || !strings.Contains(logs, "token=[redacted]") {
		t.Errorf("after rotation the job did not get the value, or it was not redacted:\n%s", logs)
	}

	// rm: later submits are refused again.
	s.mustCLI("secret", "rm", "E2E_TOKEN")
	if _, errOut, code := s.cli("submit", spec); code != 2 || !strings.Contains(errOut, "secrets[0]") {
		t.Errorf("submit after secret rm: exit %d, %q; want 2 naming secrets[0]", code, errOut)
	}

	// The audit log records who changed which secret, never the value.
	status, body = s.rawAPI("GET", "/api/v1/audit/export", nil)
	switch status {
	case 200:
		look("audit export", body)
		for _, want := range []string{"secret/E2E_TOKEN", "secret.rotate"} {
			if !strings.Contains(body, want) {
				t.Errorf("audit export lacks %q", want)
			}
		}
	case 404:
		t.Log("no audit export endpoint on this server; audit records not searched")
	default:
		t.Errorf("GET /api/v1/audit/export: status %d: %s", status, body)
	}
	look("server stderr", s.stderrText())

	for _, entry := range seen {
		what, text, _ := strings.Cut(entry, "\x00")
		if strings.Contains(text, value) {
			t.Errorf("the secret value appears in %s", what)
		}
		// Half the value is as bad as all of it.
		if strings.Contains(text, value[:len(value)-8]) || strings.Contains(text, value[len(value)-12:]) {
			t.Errorf("part of the secret value appears in %s", what)
		}
	}
}

// mustCLIStdin is cliStdin that fails the test on a non-zero exit.
func (s *server) mustCLIStdin(stdin string, args ...string) (string, string) {
	s.t.Helper()
	out, errOut, code := s.cliStdin(stdin, args...)
	if code != 0 {
		s.t.Fatalf("trainyard %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out, errOut
}
