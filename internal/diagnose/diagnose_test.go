package diagnose_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"trainyard/internal/diagnose"
	"trainyard/internal/domain"
	"trainyard/internal/logs"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// fixture is testdata/NAME.json: the exit facts of one failed attempt (its
// log is testdata/NAME.log) and the expected class and evidence lines. The
// full rendered diagnosis is compared with testdata/NAME.golden.
type fixture struct {
	Facts struct {
		JobID      int64    `json:"job_id"`
		Attempt    int      `json:"attempt"`
		Reason     string   `json:"reason"`
		ExitCode   *int     `json:"exit_code"`
		Signal     string   `json:"signal"`
		Message    string   `json:"message"`
		Memory     string   `json:"memory"`
		MaxRSS     string   `json:"max_rss"`
		GPUs       int      `json:"gpus"`
		Env        string   `json:"env"`
		Entrypoint []string `json:"entrypoint"`
	} `json:"facts"`
	WantClass    string   `json:"want_class"`
	WantEvidence []string `json:"want_evidence"`
}

func loadFixture(t *testing.T, name string) diagnose.Evidence {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx fixture
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fx); err != nil {
		t.Fatalf("%s.json: %v", name, err)
	}
	f := fx.Facts
	ev := diagnose.Evidence{JobID: f.JobID, Attempt: f.Attempt, State: domain.JobFailed, Reason: domain.Reason(f.Reason),
		ExitCode: f.ExitCode, Signal: f.Signal, Message: f.Message, Env: f.Env, Entrypoint: f.Entrypoint,
		Resources: domain.Resources{GPUs: f.GPUs}}
	for _, s := range []struct {
		v   string
		dst *domain.ByteSize
	}{{f.Memory, &ev.Resources.Memory}, {f.MaxRSS, &ev.MaxRSS}} {
		if s.v == "" {
			continue
		}
		if *s.dst, err = domain.ParseByteSize(s.v); err != nil {
			t.Fatalf("%s.json: %v", name, err)
		}
	}
	lf, err := os.Open(filepath.Join("testdata", name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	sc := bufio.NewScanner(lf)
	for sc.Scan() {
		ev.LogTail = append(ev.LogTail, logs.ParseLine(sc.Bytes()))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ev
}

func render(d diagnose.Diagnosis) string {
	var b strings.Builder
	fmt.Fprintf(&b, "class: %s\nsummary: %s\n", d.Class, d.Summary)
	for _, e := range d.Evidence {
		fmt.Fprintf(&b, "evidence: %s\n", e)
	}
	fmt.Fprintf(&b, "hint: %s\n", d.Hint)
	return b.String()
}

func TestClassifyFixtures(t *testing.T) {
	names, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 10 {
		t.Fatalf("%d fixtures in testdata, want at least 10", len(names))
	}
	seen := map[diagnose.Class]bool{}
	for _, path := range names {
		name := strings.TrimSuffix(filepath.Base(path), ".json")
		t.Run(name, func(t *testing.T) {
			ev := loadFixture(t, name)
			var fx fixture
			b, _ := os.ReadFile(path)
			json.Unmarshal(b, &fx)

			d := diagnose.Classify(ev)
			seen[d.Class] = true
			if string(d.Class) != fx.WantClass {
				t.Errorf("class = %s (%s), want %s", d.Class, d.Summary, fx.WantClass)
			}
			if !slices.Equal(d.Evidence, fx.WantEvidence) && (len(d.Evidence) > 0 || len(fx.WantEvidence) > 0) {
				t.Errorf("evidence =\n%q\nwant\n%q", d.Evidence, fx.WantEvidence)
			}
			if d.Summary == "" || d.Hint == "" {
				t.Errorf("summary %q and hint %q must both be set", d.Summary, d.Hint)
			}
			got := render(d)
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/diagnose -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("diagnosis differs from %s:\ngot:\n%s\nwant:\n%s", golden, got, want)
			}
		})
	}
	for _, c := range diagnose.Classes() {
		if c != diagnose.Unknown && !seen[c] {
			t.Errorf("no fixture is classified %s", c)
		}
	}
}

func TestClassifyDetails(t *testing.T) {
	code := func(n int) *int { return &n }
	line := func(stream, text string) logs.Line { return logs.Line{Stream: stream, Text: text} }
	tests := map[string]struct {
		ev          diagnose.Evidence
		class       diagnose.Class
		summaryHas  string
		noEvidence  bool
		evidenceLen int
	}{
		"missing dependency names env and module": {
			ev:         diagnose.Evidence{ExitCode: code(1), Env: "pytorch-2.4@3", LogTail: []logs.Line{line(logs.Stderr, "ModuleNotFoundError: No module named 'torchvision.models'")}},
			class:      diagnose.MissingDependency,
			summaryHas: "environment pytorch-2.4@3 lacks a dependency: torchvision.models",
		},
		"cannot import name": {
			ev:         diagnose.Evidence{ExitCode: code(1), Env: "e", LogTail: []logs.Line{line(logs.Stderr, "ImportError: cannot import name 'soft_unicode' from 'markupsafe' (/x/markupsafe/__init__.py)")}},
			class:      diagnose.MissingDependency,
			summaryHas: "markupsafe has no soft_unicode",
		},
		"system lines are not program output": {
			ev:         diagnose.Evidence{ExitCode: code(2), LogTail: []logs.Line{line(logs.System, "No space left on device")}},
			class:      diagnose.ExitCode,
			noEvidence: true,
		},
		"sigkill far below the limit is a plain signal": {
			ev:    diagnose.Evidence{Signal: "SIGKILL", MaxRSS: 1 << 30, Resources: domain.Resources{Memory: 8 << 30}},
			class: diagnose.KilledBySignal,
		},
		"shell exit 137 near the limit is out of memory": {
			ev:    diagnose.Evidence{ExitCode: code(137), MaxRSS: 8<<30 - 1<<20, Resources: domain.Resources{Memory: 8 << 30}},
			class: diagnose.OutOfMemory,
		},
		"latest error wins over an earlier one": {
			ev: diagnose.Evidence{ExitCode: code(1), LogTail: []logs.Line{
				line(logs.Stderr, "OSError: [Errno 28] No space left on device"),
				line(logs.Stderr, "retrying on another volume"),
				line(logs.Stderr, "FileNotFoundError: [Errno 2] No such file or directory: 'x.bin'"),
			}},
			class:      diagnose.FileNotFound,
			summaryHas: "x.bin",
		},
		"evidence keeps the last three matching lines": {
			ev: diagnose.Evidence{ExitCode: code(1), LogTail: []logs.Line{
				line(logs.Stderr, "open a: No such file or directory"),
				line(logs.Stderr, "open b: No such file or directory"),
				line(logs.Stderr, "open c: No such file or directory"),
				line(logs.Stderr, "open d: No such file or directory"),
			}},
			class:       diagnose.FileNotFound,
			evidenceLen: 3,
		},
		"gloo timeout": {
			ev:    diagnose.Evidence{ExitCode: code(1), LogTail: []logs.Line{line(logs.Stderr, "RuntimeError: [/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete")}},
			class: diagnose.NCCLTimeout,
		},
		"no facts at all": {
			ev:    diagnose.Evidence{},
			class: diagnose.Unknown,
		},
		"empty entrypoint and no env do not break hints": {
			ev:    diagnose.Evidence{Reason: domain.ReasonEntrypointNotFound, Entrypoint: []string{""}},
			class: diagnose.EntrypointNotFound,
		},
		"shell signal exit code": {
			ev:         diagnose.Evidence{ExitCode: code(139)},
			class:      diagnose.ExitCode,
			summaryHas: "signal 11",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			d := diagnose.Classify(tt.ev)
			if d.Class != tt.class {
				t.Fatalf("class = %s (%s), want %s", d.Class, d.Summary, tt.class)
			}
			if !strings.Contains(d.Summary, tt.summaryHas) {
				t.Errorf("summary %q lacks %q", d.Summary, tt.summaryHas)
			}
			if tt.noEvidence && len(d.Evidence) > 0 {
				t.Errorf("evidence = %q, want none", d.Evidence)
			}
			if tt.evidenceLen > 0 && len(d.Evidence) != tt.evidenceLen {
				t.Errorf("evidence = %q, want %d lines", d.Evidence, tt.evidenceLen)
			}
			if d.Hint == "" {
				t.Error("no hint")
			}
		})
	}
}

func TestSignalFromMessage(t *testing.T) {
	tests := map[string]string{
		"killed by SIGKILL": "SIGKILL",
		"stopped on request; killed by SIGTERM after a grace period": "SIGTERM",
		"exited with code 1":  "",
		"killed by signal 64": "signal 64",
	}
	for msg, want := range tests {
		if got := diagnose.SignalFromMessage(msg); got != want {
			t.Errorf("SignalFromMessage(%q) = %q, want %q", msg, got, want)
		}
	}
}

func FuzzClassify(f *testing.F) {
	f.Add("Traceback (most recent call last):\nValueError: x", 1, "")
	f.Add("ModuleNotFoundError: No module named 'x'", 1, "")
	f.Add("", 0, "SIGKILL")
	f.Fuzz(func(t *testing.T, log string, code int, signal string) {
		var tail []logs.Line
		for l := range strings.SplitSeq(log, "\n") {
			tail = append(tail, logs.ParseLine([]byte(l)))
		}
		d := diagnose.Classify(diagnose.Evidence{ExitCode: &code, Signal: signal, LogTail: tail})
		if d.Class == "" || d.Summary == "" || d.Hint == "" {
			t.Fatalf("incomplete diagnosis %+v", d)
		}
	})
}
