package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"trainyard/internal/api"
	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/secrets"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite"
)

// newContractHarness runs the commands against a real server (API, service,
// SQLite store) holding one pool with a quota, one queued job (id 1), an
// environment, a template and a secret.
func newContractHarness(t *testing.T) *harness {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := secrets.NewKey(bytes.Repeat([]byte{1}, secrets.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	svc := service.New(service.Config{Store: st, ArtifactsRoot: filepath.Join(dir, "artifacts"),
		Keyring: secrets.NewKeyring(key), Logger: slog.New(slog.DiscardHandler), Notify: contractNotify{}})
	token, err := svc.Identity.Bootstrap(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// A job's manifest needs an attempt that ran; this server has no
	// executor, so job 1's is canned.
	mux := http.NewServeMux()
	mux.Handle("/", api.Handler(api.Config{Service: svc}))
	mux.HandleFunc("GET /api/v1/jobs/1/artifacts", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, apitypes.Manifest{Job: 1, Attempt: 1, RecordedAt: testNow, TotalBytes: 3,
			Files: []apitypes.ArtifactFile{{Path: "model.pt", Size: 3, SHA256: strings.Repeat("ab", 32)}}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { srv.Close(); st.Close() })
	h := &harness{t: t, srv: &fakeServer{t: t, srv: srv}, vars: map[string]string{
		EnvServer: srv.URL, EnvToken: token, "XDG_CONFIG_HOME": t.TempDir(), "NO_COLOR": "",
	}}
	h.loadSpec = func([]byte, []string) (domain.Spec, error) { return domain.Spec{}, nil }
	h.mustRun(0, "pool", "create", "default", "--node", "name=n1,cpus=8,memory=32GiB,gpus=0-1")
	h.mustRun(0, "quota", "set", "default", "default", "--gpus", "2", "--cpus", "8")
	h.mustRun(0, "submit", writeSpec(t, dir, "job.yaml", "name: first\nentrypoint: [\"true\"]\n"))
	h.mustRun(0, "env", "register", "py", "--path-prefix", dir)
	h.mustRun(0, "template", "create", "tpl", "-f", writeSpec(t, dir, "tpl.yaml", "name: tpl\nentrypoint: [\"true\"]\n"))
	h.stdin = "s3cret-value"
	h.mustRun(0, "secret", "set", "API_KEY")
	h.stdin = ""
	return h
}

// actionCommands print no data, only a confirmation (or a file, a stream):
// they take no -o. Every other command does; a new command must be added
// to one list or the other.
var actionCommands = []string{
	"trainyard", "trainyard alerts ack", "trainyard alerts test", "trainyard artifacts get", "trainyard audit export",
	"trainyard audit witness", "trainyard budget rm", "trainyard cancel", "trainyard checkpoints get", "trainyard hold", "trainyard release", "trainyard priority",
	"trainyard env deprecate", "trainyard env register", "trainyard login", "trainyard logs", "trainyard ui",
	"trainyard project set", "trainyard quota rm", "trainyard role grant", "trainyard role revoke",
	"trainyard secret rm", "trainyard secret rotate-key", "trainyard secret set", "trainyard spec schema",
	"trainyard spec validate", "trainyard template create", "trainyard token revoke", "trainyard user create",
	"trainyard notify clear",
}

// contractNotify is a server's notifier with one channel, team, and no
// mail relay.
type contractNotify struct{}

func (contractNotify) Channels() []string { return []string{"team"} }
func (contractNotify) Email() bool        { return false }

// TestOutputContract walks the command tree: every command that prints
// data takes -o table|wide|json|yaml, and against a real server each format
// exits 0 with output that parses (json, yaml) or is not empty (table, wide).
func TestOutputContract(t *testing.T) {
	h := newContractHarness(t)
	dir := t.TempDir()
	n := 0
	uniq := func() string { n++; return fmt.Sprint(n) }
	// The server checks --until against its own clock, not the test's.
	until := time.Now().AddDate(0, 1, 0).Format(time.DateOnly)
	// request files a compute request and returns its id, for approve/deny.
	request := func() string {
		return strings.TrimSpace(h.mustRun(0, "quota", "request", "--project", "default", "--pool", "default",
			"--gpus", "1", "--until", until, "--reason", "deadline").stdout)
	}
	jobFile := writeSpec(t, dir, "j.yaml", "name: again\nentrypoint: [\"true\"]\n")
	sweep := func() string {
		return strings.TrimSpace(h.mustRun(0, "submit", jobFile, "--array", "0-1").stdout)
	}
	args := map[string]func() []string{
		"trainyard alerts ls":      func() []string { return nil },
		"trainyard artifacts ls":   func() []string { return []string{"1"} },
		"trainyard audit ls":       func() []string { return nil },
		"trainyard audit verify":   func() []string { return nil },
		"trainyard budget ls":      func() []string { return nil },
		"trainyard budget set":     func() []string { return []string{"default", "--amount", uniq()} },
		"trainyard checkpoints du": func() []string { return nil },
		"trainyard cost":           func() []string { return []string{"--since", "1d", "--by", "day"} },
		"trainyard report":         func() []string { return []string{"--since", "1d", "--by", "pool"} },
		"trainyard checkpoints ls": func() []string { return []string{"1"} },
		"trainyard compare":        func() []string { return []string{"1", strings.TrimSpace(h.mustRun(0, "submit", jobFile).stdout)} },
		"trainyard env ls":         func() []string { return nil },
		"trainyard env show":       func() []string { return []string{"py"} },
		"trainyard gc":             func() []string { return []string{"--dry-run"} },
		"trainyard ls":             func() []string { return nil },
		"trainyard metrics":        func() []string { return []string{"1"} },
		"trainyard notify set":     func() []string { return []string{"--on", "failed", "--channel", "team"} },
		"trainyard notify show":    func() []string { return nil }, // after notify set: the walk is in name order
		"trainyard pool create":    func() []string { return []string{"p" + uniq(), "--node", "name=n1,cpus=1,memory=1GiB"} },
		"trainyard pool ls":        func() []string { return nil },
		"trainyard pool show":      func() []string { return []string{"default"} },
		"trainyard pool update":    func() []string { return []string{"default", "--max-running", uniq()} },
		"trainyard project ls":     func() []string { return nil },
		"trainyard queue":          func() []string { return nil },
		"trainyard quota approve":  func() []string { return []string{request()} },
		"trainyard quota deny":     func() []string { return []string{request(), "--note", "the pool is full"} },
		"trainyard quota ls":       func() []string { return nil },
		"trainyard quota request": func() []string {
			return []string{"--project", "default", "--pool", "default", "--gpus", "1", "--until", until, "--reason", "a deadline"}
		},
		"trainyard quota requests": func() []string { return nil },
		"trainyard quota set":      func() []string { return []string{"default", "default", "--jobs", uniq()} },
		"trainyard rerun":          func() []string { return []string{"1"} },
		"trainyard secret ls":      func() []string { return nil },
		"trainyard show":           func() []string { return []string{"1"} },
		"trainyard sim":            func() []string { return []string{filepath.Join("..", "simulate", "testdata", "gang.yaml")} },
		"trainyard status":         func() []string { return nil },
		"trainyard submit":         func() []string { return []string{jobFile} },
		"trainyard sweep ls":       func() []string { return nil },
		"trainyard sweep show":     func() []string { return []string{sweep()} },
		"trainyard sweep cancel":   func() []string { return []string{sweep()} },
		"trainyard template ls":    func() []string { return nil },
		"trainyard template show":  func() []string { return []string{"tpl"} },
		"trainyard token create":   func() []string { return nil },
		"trainyard token ls":       func() []string { return nil },
		"trainyard user ls":        func() []string { return nil },
		"trainyard version":        func() []string { return nil },
		"trainyard whoami":         func() []string { return nil },
		"trainyard why":            func() []string { return []string{"1"} },
	}

	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		path := c.CommandPath()
		if c.Hidden || c.HasSubCommands() || slices.Contains(actionCommands, path) || strings.HasPrefix(path, "trainyard completion") {
			return
		}
		t.Run(strings.TrimPrefix(path, "trainyard "), func(t *testing.T) {
			parent := h.t
			h.t = t
			defer func() { h.t = parent }()
			if c.Flags().Lookup("output") == nil {
				t.Fatalf("%s prints data but takes no -o; register it with outputFlag (or list it in actionCommands)", path)
			}
			mk, ok := args[path]
			if !ok {
				t.Fatalf("no arguments for %s in this test; add them", path)
			}
			for _, format := range outputFormats {
				argv := append([]string{strings.TrimPrefix(path, "trainyard ")}, mk()...)
				argv = append(strings.Fields(argv[0]), append(argv[1:], "-o", format)...)
				r := h.mustRun(0, argv...)
				switch format {
				case formatJSON:
					var v any
					if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v == nil {
						t.Errorf("%s: stdout is not JSON (%v):\n%s", strings.Join(argv, " "), err, r.stdout)
					}
				case formatYAML:
					var v any
					if err := yaml.Unmarshal([]byte(r.stdout), &v); err != nil || v == nil {
						t.Errorf("%s: stdout is not YAML (%v):\n%s", strings.Join(argv, " "), err, r.stdout)
					}
					if json.Valid([]byte(r.stdout)) {
						t.Errorf("%s: stdout is JSON, want block YAML:\n%s", strings.Join(argv, " "), r.stdout)
					}
				default:
					if r.stdout+r.stderr == "" {
						t.Errorf("%s printed nothing", strings.Join(argv, " "))
					}
				}
			}
		})
	}
	root := newRoot(BuildInfo{}, defaultEnv())
	root.InitDefaultCompletionCmd()
	walk(root)
}

// TestOutputUnknownFormat: an unknown -o is a usage error naming the valid
// formats, before anything is sent to the server.
func TestOutputUnknownFormat(t *testing.T) {
	for _, argv := range [][]string{{"ls"}, {"show", "1"}, {"whoami"}, {"metrics", "1"}, {"version"}} {
		h := newHarness(t)
		r := h.mustRun(2, append(argv, "-o", "xml")...)
		want := `error: invalid --output "xml": want one of table, wide, json, yaml`
		if argv[0] == "metrics" {
			want += ", csv"
		}
		if !strings.HasPrefix(r.stderr, want+"\n") {
			t.Errorf("%v -o xml: stderr %q, want %q", argv, r.stderr, want)
		}
		if reqs := h.srv.seenRequests(); len(reqs) != 0 {
			t.Errorf("%v -o xml sent %v", argv, reqs)
		}
	}
}
