package local

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"trainyard/internal/domain"
	"trainyard/internal/logs"
)

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	os.WriteFile(filepath.Join(bin, "train"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(bin, "data"), []byte("x"), 0o644)
	cases := map[string]struct {
		name    string
		env     []string
		want    string
		wantErr string
	}{
		"found in the job's PATH": {name: "train", env: []string{"PATH=/nonexistent:" + bin}, want: filepath.Join(bin, "train")},
		"first PATH entry wins":   {name: "train", env: []string{"PATH=" + bin, "PATH=/usr/bin"}, want: filepath.Join(bin, "train")},
		"path with a slash as is": {name: "./x/train", env: nil, want: "./x/train"},
		"not in PATH":             {name: "train", env: []string{"PATH=/usr/bin:/bin"}, wantErr: `"train" not found in PATH=/usr/bin:/bin`},
		"no PATH at all":          {name: "train", env: []string{"HOME=/"}, wantErr: "PATH is not set"},
		"not executable":          {name: "data", env: []string{"PATH=" + bin}, wantErr: "is not executable"},
		"empty":                   {name: "", wantErr: "empty"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := resolve(tc.name, tc.env, dir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("resolve = %q, %v; want error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("resolve = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestIsShell(t *testing.T) {
	cases := map[string]struct {
		argv []string
		want bool
	}{
		"sh -c":         {[]string{"/bin/sh", "-c", "x"}, true},
		"bash -lc":      {[]string{"bash", "-lc", "x"}, true},
		"python":        {[]string{"python3", "-c", "x"}, false},
		"sh script":     {[]string{"sh", "run.sh", "x"}, false},
		"sh -c missing": {[]string{"sh", "-c"}, false},
	}
	for name, tc := range cases {
		if got := isShell(tc.argv); got != tc.want {
			t.Errorf("%s: isShell(%q) = %v, want %v", name, tc.argv, got, tc.want)
		}
	}
}

func TestPump(t *testing.T) {
	long := strings.Repeat("x", maxLine+10)
	cases := map[string]struct {
		in   string
		want []string
		last string
	}{
		"lines":                 {in: "a\nb\n", want: []string{"a", "b"}, last: "b"},
		"final line no newline": {in: "a\nrest", want: []string{"a", "rest"}, last: "rest"},
		"empty lines kept":      {in: "\n\nz\n\n", want: []string{"", "", "z", ""}, last: "z"},
		"long line split":       {in: long + "\n", want: []string{long[:maxLine], long[maxLine:]}, last: long[maxLine:]},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			for _, reader := range []string{"whole", "one byte at a time"} {
				var out bytes.Buffer
				w := &logWriter{f: &out}
				var r = strings.NewReader(tc.in)
				var last string
				if reader == "whole" {
					w.pump(r, logs.Stdout, &last)
				} else {
					w.pump(iotest.OneByteReader(r), logs.Stdout, &last)
				}
				var got []string
				for _, raw := range strings.SplitAfter(out.String(), "\n") {
					if raw == "" {
						continue
					}
					ln := logs.ParseLine([]byte(raw))
					if ln.Stream != logs.Stdout {
						t.Fatalf("%s: bad line %q", reader, raw)
					}
					got = append(got, ln.Text)
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("%s: lines = %q, want %q", reader, got, tc.want)
				}
				if last != tc.last {
					t.Errorf("%s: last = %q, want %q", reader, last, tc.last)
				}
			}
		})
	}
}

func TestParseGPUIndices(t *testing.T) {
	cases := map[string]struct {
		out     string
		want    []int
		wantErr bool
	}{
		"none":     {out: "", want: nil},
		"two":      {out: "1\n0\n", want: []int{0, 1}},
		"spaces":   {out: " 0 \n 1\r\n", want: []int{0, 1}},
		"garbage":  {out: "No devices were found\n", wantErr: true},
		"negative": {out: "-1\n", wantErr: true},
	}
	for name, tc := range cases {
		got, err := parseGPUIndices([]byte(tc.out))
		if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, %v; want %v (error %v)", name, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestMemTotal(t *testing.T) {
	p := filepath.Join(t.TempDir(), "meminfo")
	os.WriteFile(p, []byte("MemFree: 1 kB\nMemTotal:       24684092 kB\n"), 0o644)
	got, err := memTotal(p)
	if err != nil || got != domain.ByteSize(24684092*1024) {
		t.Errorf("memTotal = %v, %v", got, err)
	}
	os.WriteFile(p, []byte("MemFree: 1 kB\n"), 0o644)
	if _, err := memTotal(p); err == nil {
		t.Error("memTotal without MemTotal: want an error")
	}
}

func TestInventoryDetected(t *testing.T) {
	inv, err := newExec(t).Inventory(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if len(inv.Nodes) != 1 || inv.Nodes[0].Name != host || inv.Nodes[0].CPUs < 1 || inv.Nodes[0].Memory <= 0 {
		t.Errorf("inventory = %+v, want this machine (%s)", inv, host)
	}
	t.Logf("detected %+v", inv.Nodes[0])
}

func TestProcID(t *testing.T) {
	self, err := selfProcID()
	if err != nil {
		t.Fatal(err)
	}
	if !self.alive() {
		t.Error("own process is not alive")
	}
	if (procID{PID: self.PID, Start: self.Start + 1}).alive() {
		t.Error("a different start time must not count as the same process")
	}
	back, err := parseProcID([]byte(self.String() + "\n"))
	if err != nil || back != self {
		t.Errorf("parseProcID(%q) = %v, %v", self.String(), back, err)
	}
	for _, bad := range []string{"", "12", "x 1", "-1 5", "1 2 3"} {
		if _, err := parseProcID([]byte(bad)); err == nil {
			t.Errorf("parseProcID(%q): want an error", bad)
		}
	}
}
