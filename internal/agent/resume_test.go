package agent

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
)

// entry is one entry of a test archive.
type entry struct {
	name string
	typ  byte
	body string
	link string
}

func file(name, body string) entry { return entry{name: name, typ: tar.TypeReg, body: body} }

// archive builds a tar stream of es, as the server's archive route does
// (and as a hostile one could).
func archive(t *testing.T, es ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body)), Linkname: e.link, ModTime: time.Unix(1e9, 0)}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func hexSum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// dirDigest is a directory checkpoint's digest by the server's rule
// (executor.Outputs.Digest): the lines "<sha256>  <size>  <path>" of its
// files below it, in order of path, its marker left out.
func dirDigest(files map[string]string) string {
	paths := make([]string, 0, len(files))
	for p := range files {
		if p != domain.CheckpointMarker {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	var b strings.Builder
	for _, p := range paths {
		fmt.Fprintf(&b, "%s  %d  %s\n", hexSum(files[p]), len(files[p]), p)
	}
	return hexSum(b.String())
}

// keep registers checkpoint name with the archive of es and digest sum
// (size: the bytes of its files) on the fake API.
func (a *fakeAPI) keep(name, sum string, es ...entry) {
	a.t.Helper()
	var size int64
	for _, e := range es {
		if e.typ == tar.TypeReg {
			size += int64(len(e.body))
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.kept = append(a.kept, apitypes.Checkpoint{Name: name, Attempt: 1, Size: size, SHA256: sum})
	a.archives[name] = archive(a.t, es...)
}

// resumeEnv is the candidates' variable for cands ("name=sha256" each).
func resumeVar(t *testing.T, cands ...candidate) string {
	b, err := json.Marshal(cands)
	if err != nil {
		t.Fatal(err)
	}
	return resumeEnv + "=" + string(b)
}

// resumeScript prints TRAINYARD_RESUME_FROM and what is below the
// checkpoint directory when the command starts, then runs more.
const resumeScript = `set -e
echo "from=[$TRAINYARD_RESUME_FROM] candidates=[$TRAINYARD_AGENT_RESUME]"
cd "$TRAINYARD_CHECKPOINT_DIR" && find . | sort | tr '\n' ' '; echo
`

// TestResumeSkipsHostileArchives: the candidates are tried in order; an
// archive with a link, a "..", an absolute path, an entry outside the
// checkpoint, a device, or more bytes than registered is refused, and one
// whose files are not the registered digest too; each leaves nothing
// behind. The first intact one is the command's TRAINYARD_RESUME_FROM,
// reported as the one it resumed from with why the others were skipped,
// and never uploaded or registered again unless the job changes it.
func TestResumeSkipsHostileArchives(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	root := t.TempDir()
	out := filepath.Join(root, "outputs")
	good := map[string]string{"model.pt": "weights-2", "opt/state.pt": "optimizer-2", domain.CheckpointMarker: ""}
	api.keep("link", "", file("link/a", "x"), entry{name: "link/leak", typ: tar.TypeSymlink, link: "/etc/passwd"})
	api.keep("hard", "", file("hard/a", "x"), entry{name: "hard/b", typ: tar.TypeLink, link: "hard/a"})
	api.keep("escape", "", file("escape/a", "x"), file("escape/../../x", "planted"))
	api.keep("abs", "", file("/tmp/abs-planted-by-test", "planted"))
	api.keep("outside", "", file("outside/a", "x"), file("elsewhere/b", "planted"))
	api.keep("device", "", entry{name: "device/null", typ: tar.TypeChar})
	api.keep("mismatch", dirDigest(map[string]string{"model.pt": "the registered weights"}), file("mismatch/model.pt", "other weights"))
	api.keep("big", "", file("big/a", "x"))
	api.archives["big"] = archive(t, file("big/a", strings.Repeat("x", 1000))) // more than the 1 byte registered
	api.keep("step-2", dirDigest(good), entry{name: "step-2/", typ: tar.TypeDir}, file("step-2/.complete", ""),
		file("step-2/model.pt", "weights-2"), file("step-2/opt/state.pt", "optimizer-2"))
	names := []string{"link", "hard", "escape", "abs", "outside", "device", "mismatch", "big", "gone", "step-2"}
	var cands []candidate
	for _, n := range names {
		sum := ""
		for _, k := range api.kept {
			if k.Name == n {
				sum = k.SHA256
			}
		}
		cands = append(cands, candidate{Name: n, SHA256: sum})
	}
	gate := filepath.Join(root, "gate")
	script := resumeScript + `
cat "$TRAINYARD_RESUME_FROM/model.pt"; echo
while [ ! -e "$GATE" ]; do sleep 0.05; done
printf 'more' > "$TRAINYARD_RESUME_FROM/extra.pt"; touch "$TRAINYARD_RESUME_FROM/.complete"
mkdir "$TRAINYARD_CHECKPOINT_DIR/step-3"; printf 'weights-3' > "$TRAINYARD_CHECKPOINT_DIR/step-3/model.pt"
: > "$TRAINYARD_CHECKPOINT_DIR/step-3/.complete"
`
	env := append(jobEnv(api.srv.URL, out), resumeVar(t, cands...), "TRAINYARD_RESUME_FROM=/stale", "GATE="+gate)
	p := startAgent(t, env, "sh", "-c", script)
	p.waitOutput(t, "weights-2")
	ck := filepath.Join(out, "checkpoints")
	if got, want := firstLine(p.stdout.String()), "from=["+filepath.Join(ck, "step-2")+"] candidates=[]"; got != want {
		t.Errorf("the command saw %q, want %q", got, want)
	}
	if !strings.Contains(p.stdout.String(), ". ./step-2 ./step-2/.complete ./step-2/model.pt ./step-2/opt ./step-2/opt/state.pt \n") {
		t.Errorf("the checkpoint directory held, at the start: %q; want step-2 only, nothing of the refused ones", p.stdout)
	}
	// Reported once the scan has run at least once more: no upload of it.
	api.waitCall(t, "resumed step-2|"+strings.Join(noteOf(t, api, names[:len(names)-1]), "; "))
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d; stderr %q", code, p.stderr)
	}
	for _, planted := range []string{filepath.Join(root, "x"), filepath.Join(out, "x"), "/tmp/abs-planted-by-test", filepath.Join(ck, "elsewhere")} {
		if _, err := os.Lstat(planted); err == nil {
			t.Errorf("%s was written", planted)
		}
	}
	calls := api.snapshot()
	for _, c := range calls {
		if strings.HasPrefix(c, "PUT checkpoints/step-2/") && c != "PUT checkpoints/step-2/extra.pt" && c != "PUT checkpoints/step-2/.complete" {
			t.Errorf("the fetched checkpoint was uploaded again: %q", c)
		}
	}
	// Changed by the job: its new file and its marker, then registered
	// again; the new checkpoint as ever.
	for _, want := range []string{"PUT checkpoints/step-2/extra.pt", "complete step-2", "PUT checkpoints/step-3/model.pt", "complete step-3"} {
		if !slices.Contains(calls, want) {
			t.Errorf("no %q; calls %q", want, calls)
		}
	}
	for _, n := range names[:len(names)-1] {
		if !strings.Contains(p.stderr.String(), "trainyard agent: not resuming from checkpoint "+n+": ") {
			t.Errorf("stderr does not say why %s was skipped: %q", n, p.stderr)
		}
	}
	if strings.Contains(p.stderr.String(), token) {
		t.Errorf("the token is in stderr: %q", p.stderr)
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// noteOf is the note the agent reports for the skipped names, read from
// the report it made (the reasons are the agent's words): it checks each
// name is there, in order.
func noteOf(t *testing.T, api *fakeAPI, skipped []string) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, c := range api.snapshot() {
			rest, ok := strings.CutPrefix(c, "resumed step-2|")
			if !ok {
				continue
			}
			parts := strings.Split(rest, "; ")
			var got []string
			for _, p := range parts {
				n, _, _ := strings.Cut(p, ": ")
				got = append(got, n)
			}
			if !slices.Equal(got, skipped) {
				t.Fatalf("the note names %q, want %q: %q", got, skipped, rest)
			}
			return parts
		}
		if time.Now().After(deadline) {
			t.Fatalf("no resume report; calls %q", api.snapshot())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestResumeOneFile: a one-file checkpoint comes without its marker; it
// is written beside it, so that the file is complete and its digest, of
// its bytes, verified.
func TestResumeOneFile(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	out := filepath.Join(t.TempDir(), "outputs")
	api.keep("model.pt", hexSum("the weights"), file("model.pt", "the weights"))
	p := startAgent(t, append(jobEnv(api.srv.URL, out), resumeVar(t, candidate{Name: "model.pt", SHA256: hexSum("the weights")})),
		"sh", "-c", resumeScript+`cat "$TRAINYARD_RESUME_FROM"; echo`)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d; stderr %q", code, p.stderr)
	}
	ck := filepath.Join(out, "checkpoints")
	if want := "from=[" + filepath.Join(ck, "model.pt") + "] candidates=[]\n. ./model.pt ./model.pt.complete \nthe weights\n"; p.stdout.String() != want {
		t.Errorf("stdout %q, want %q", p.stdout, want)
	}
	api.waitCall(t, "resumed model.pt|")
	for _, c := range api.snapshot() {
		if strings.HasPrefix(c, "PUT checkpoints/") || strings.HasPrefix(c, "complete ") {
			t.Errorf("the fetched checkpoint was reported as new: %q", c)
		}
	}
}

// TestResumeFailsSoft: when no candidate can be fetched (the server
// refuses, or does not answer), the command starts afresh with an empty
// TRAINYARD_RESUME_FROM and its own exit status; the agent says why on
// stderr and reports the note.
func TestResumeFailsSoft(t *testing.T) {
	t.Parallel()
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t)
		api.keep("step-1", hexSum("x"), file("step-1/a", "x"))
		api.mu.Lock()
		api.refuse["archive"] = 403
		api.mu.Unlock()
		out := filepath.Join(t.TempDir(), "outputs")
		p := startAgent(t, append(jobEnv(api.srv.URL, out), resumeVar(t, candidate{Name: "step-1", SHA256: hexSum("x")})),
			"sh", "-c", resumeScript+"exit 5")
		if code := p.wait(t); code != 5 {
			t.Fatalf("exit %d, want the command's 5; stderr %q", code, p.stderr)
		}
		if got := firstLine(p.stdout.String()); got != "from=[] candidates=[]" {
			t.Errorf("the command saw %q", got)
		}
		if !strings.Contains(p.stderr.String(), "trainyard agent: not resuming from checkpoint step-1: the archive could not be downloaded: the server answered 403") ||
			!strings.Contains(p.stderr.String(), "starting afresh") {
			t.Errorf("stderr %q", p.stderr)
		}
		api.waitCall(t, "resumed |step-1: the archive could not be downloaded: the server answered 403 Forbidden: no such thing")
	})
	t.Run("unreadable candidates", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t)
		out := filepath.Join(t.TempDir(), "outputs")
		p := startAgent(t, append(jobEnv(api.srv.URL, out), resumeEnv+"=not json"), "sh", "-c", resumeScript)
		if code := p.wait(t); code != 0 {
			t.Fatalf("exit %d; stderr %q", code, p.stderr)
		}
		if got := firstLine(p.stdout.String()); got != "from=[] candidates=[]" {
			t.Errorf("the command saw %q", got)
		}
		if !strings.Contains(p.stderr.String(), "trainyard agent: "+resumeEnv+" is not a JSON list") {
			t.Errorf("stderr %q", p.stderr)
		}
	})
	t.Run("no API", func(t *testing.T) {
		t.Parallel()
		out := filepath.Join(t.TempDir(), "outputs")
		env := []string{"TRAINYARD_OUTPUT_DIR=" + out, "TRAINYARD_CHECKPOINT_DIR=" + filepath.Join(out, "checkpoints"),
			resumeVar(t, candidate{Name: "step-1"})}
		p := startAgent(t, env, "sh", "-c", `echo "from=[$TRAINYARD_RESUME_FROM]"`)
		if code := p.wait(t); code != 0 {
			t.Fatalf("exit %d; stderr %q", code, p.stderr)
		}
		if p.stdout.String() != "from=[]\n" || !strings.Contains(p.stderr.String(), "not resuming from any of the 1 checkpoints") {
			t.Errorf("stdout %q stderr %q", p.stdout, p.stderr)
		}
	})
}

// TestResumeReportWaitsForTheStart: the server answers not_started until
// it has recorded the attempt's start; the agent reports again, while the
// command runs.
func TestResumeReportWaitsForTheStart(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	api.keep("step-1", dirDigest(map[string]string{"a": "x"}), file("step-1/a", "x"))
	api.mu.Lock()
	api.notStarted = 2
	api.mu.Unlock()
	out := filepath.Join(t.TempDir(), "outputs")
	p := startAgent(t, append(jobEnv(api.srv.URL, out), resumeVar(t, candidate{Name: "step-1", SHA256: dirDigest(map[string]string{"a": "x"})})),
		"sh", "-c", resumeScript)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d; stderr %q", code, p.stderr)
	}
	calls := api.snapshot()
	if i, j := slices.Index(calls, "not started"), slices.Index(calls, "resumed step-1|"); i < 0 || j < i {
		t.Errorf("calls %q, want not_started answers, then the report", calls)
	}
	if strings.Contains(p.stderr.String(), "409") {
		t.Errorf("a wait for the start is no refusal: %q", p.stderr)
	}
}

func TestEntryPath(t *testing.T) {
	for _, c := range []struct {
		name string
		typ  byte
		want string // "" : refused
	}{
		{"ck", tar.TypeReg, "checkpoints/ck"},
		{"ck/", tar.TypeDir, "checkpoints/ck"},
		{"ck/a/b", tar.TypeReg, "checkpoints/ck/a/b"},
		{"ck/../x", tar.TypeReg, ""},
		{"../ck/x", tar.TypeReg, ""},
		{"/ck/x", tar.TypeReg, ""},
		{"ck//x", tar.TypeReg, ""},
		{"ck/./x", tar.TypeReg, ""},
		{"ck/x/", tar.TypeReg, ""},
		{"other/x", tar.TypeReg, ""},
		{"ckx", tar.TypeReg, ""},
		{"ck/x\x00y", tar.TypeReg, ""},
		{"", tar.TypeReg, ""},
		{"ck" + strings.Repeat("/d", maxDepth), tar.TypeReg, ""},
	} {
		got, err := entryPath("ck", &tar.Header{Name: c.name, Typeflag: c.typ})
		if got != c.want || (c.want == "") != (err != nil) {
			t.Errorf("entryPath(%q) = %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}
