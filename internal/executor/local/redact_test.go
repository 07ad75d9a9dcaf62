package local

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/logs"
)

func TestRedactLine(t *testing.T) {
	tests := map[string]struct {
		values []string
		in     string
		want   string
	}{
		"none":               {[]string{"hunter2x"}, "nothing here", "nothing here"},
		"one":                {[]string{"hunter2x"}, "pw=hunter2x!", "pw=[redacted]!"},
		"every occurrence":   {[]string{"hunter2x"}, "hunter2x hunter2xhunter2x", "[redacted] [redacted]"},
		"two values":         {[]string{"aaaa1", "bbbb2"}, "x aaaa1 y bbbb2 z", "x [redacted] y [redacted] z"},
		"overlapping values": {[]string{"abcd", "cdef"}, "-abcdef-", "-[redacted]-"},
		"value in value":     {[]string{"secret-long", "long"}, "secret-long long", "[redacted] [redacted]"},
		"self overlap":       {[]string{"aaaa"}, "aaaaaa", "[redacted]"},
		"too short ignored":  {[]string{"abc"}, "abc abc", "abc abc"},
		"multi-line value":   {[]string{"line-one\nline-two"}, "got line-two here", "got [redacted] here"},
		"no values":          {nil, "hunter2x", "hunter2x"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := string(newRedactor(tc.values).line([]byte(tc.in)))
			if got != tc.want {
				t.Errorf("line(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestRedactHoldBack(t *testing.T) {
	r := newRedactor([]string{"SECRETVALUE", "zzzz"})
	tests := map[string]struct {
		piece string
		want  int
	}{
		"no prefix at the end": {"hello", 0},
		"partial value":        {"hello SECR", 4},
		"one byte":             {"hello S", 1},
		"whole value":          {"hello SECRETVALUE", 0}, // whole: redacted in place
		"longest wins":         {"xx zzzSECRETVALU", 10},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := r.holdBack([]byte(tc.piece)); got != tc.want {
				t.Errorf("holdBack(%q) = %d, want %d", tc.piece, got, tc.want)
			}
		})
	}
}

// TestPumpRedacts: a value split over reads, over a long-line split point,
// and in a final line without newline never reaches the log.
func TestPumpRedacts(t *testing.T) {
	const secret = "p4ss-w0rd-XYZ"
	straddle := strings.Repeat("x", maxLine-5) + secret + "\n" // the value crosses the split point
	for name, in := range map[string]string{
		"echo":            "token is " + secret + "\n",
		"straddles split": straddle,
		"no newline":      "end " + secret,
		"stderr style":    secret + ": command not found\n",
	} {
		t.Run(name, func(t *testing.T) {
			for _, oneByte := range []bool{false, true} {
				var out bytes.Buffer
				w := &logWriter{f: &out, redact: newRedactor([]string{secret})}
				var r = strings.NewReader(in)
				var last string
				if oneByte {
					w.pump(iotest.OneByteReader(r), logs.Stderr, &last)
				} else {
					w.pump(r, logs.Stderr, &last)
				}
				if strings.Contains(out.String(), secret[:6]) || strings.Contains(last, secret[:6]) {
					t.Errorf("one byte %v: the value (or its start) reached the log: %q (last %q)", oneByte, tail(out.String()), last)
				}
				if !strings.Contains(out.String(), "[redacted]") || !strings.Contains(last+out.String(), "[redacted]") {
					t.Errorf("one byte %v: no [redacted] mark in %q", oneByte, tail(out.String()))
				}
			}
		})
	}
}

func tail(s string) string {
	if len(s) > 200 {
		return "…" + s[len(s)-200:]
	}
	return s
}

// TestLaunchRedactsLog: through a real shim, a job that prints its secret
// environment variable (whole and in two writes of one line) leaves only
// [redacted] in the log, while the process did see the value.
func TestLaunchRedactsLog(t *testing.T) {
	const secret = "tr41n-yard-S3CRET"
	h := executortest.NewHarness(t, newExec(t))
	l := h.Launch(t, shell(`echo "key=$MY_SECRET"; printf 'half=%s' "${MY_SECRET%%-S3CRET}"; printf '%s\n' "-S3CRET"; `+
		`echo "$MY_SECRET" > seen; echo "$MY_SECRET" >&2; exit 3`), func(l *executor.Launch) {
		l.Env = append(l.Env, "MY_SECRET="+secret)
		l.Redact = []string{secret, "ab"}
	})
	ev := h.Wait(t, l.Ref, executor.Exited)
	if ev.State != domain.AttemptFailed || strings.Contains(ev.Message, secret) {
		t.Errorf("exit event %+v: want failed, without the value", ev)
	}
	b, err := os.ReadFile(filepath.Join(l.WorkDir, "seen"))
	if err != nil || strings.TrimSpace(string(b)) != secret {
		t.Fatalf("the process saw %q (%v), want the value", b, err)
	}
	raw, err := os.ReadFile(l.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(secret)) || bytes.Contains(raw, []byte("tr41n")) {
		t.Errorf("the log holds the value:\n%s", raw)
	}
	var texts []string
	for _, ln := range executortest.ReadLog(t, l.LogPath) {
		if ln.Stream != logs.System {
			texts = append(texts, ln.Stream+" "+ln.Text)
		}
	}
	want := []string{"stdout key=[redacted]", "stdout half=[redacted]", "stderr [redacted]"}
	for _, w := range want {
		if !strings.Contains(strings.Join(texts, "\n"), w) {
			t.Errorf("log lines %q lack %q", texts, w)
		}
	}
	// The value reached the process through a pipe, not a file: nothing the
	// executor or the shim wrote holds it (the job wrote "seen" itself).
	err = filepath.WalkDir(l.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || p == filepath.Join(l.WorkDir, "seen") {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the secret value", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
