package local

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"trainyard/internal/codepkg"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
)

// tarball is a tar.gz holding files (name → content).
func tarball(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Size: int64(len(files[n])), Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(files[n]))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return buf.Bytes()
}

func codeOf(archive []byte, dir string) *executor.Code {
	return &executor.Code{SHA256: "sha256:test", Dir: dir, Open: func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(archive)), nil
	}}
}

// Each attempt runs in a fresh unpack of the package: what an attempt
// leaves in its working directory is not there for the next.
func TestEachAttemptGetsAFreshUnpack(t *testing.T) {
	h := executortest.NewHarness(t, newExec(t))
	pkg := tarball(t, map[string]string{"train.py": "print(1)", "lib/util.py": "x"})
	var refs []executor.Launch
	for attempt := 1; attempt <= 2; attempt++ {
		l := h.Launch(t, shell("ls > ../seen-$TRAINYARD_ATTEMPT; echo x > scratch"), func(l *executor.Launch) {
			l.Attempt = attempt
			l.Env = append(l.Env, "TRAINYARD_ATTEMPT="+string(rune('0'+attempt)))
			l.Code = codeOf(pkg, l.WorkDir)
		})
		h.Wait(t, l.Ref, executor.Exited)
		refs = append(refs, l)
	}
	for i, l := range refs {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(l.WorkDir), "seen-"+string(rune('1'+i))))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Fields(string(b)); !slices.Equal(got, []string{"lib", "train.py"}) {
			t.Errorf("attempt %d saw %q in its working directory, want exactly the package", i+1, got)
		}
	}
}

// A package that cannot be unpacked fails the launch, saying why, and
// leaves nothing behind; a package over the limits names the limit.
func TestBadPackageFailsTheLaunch(t *testing.T) {
	zeros := tarball(t, map[string]string{"data/zeros.bin": string(make([]byte, 8<<20))})
	tests := map[string]struct {
		code   func(dir string) *executor.Code
		limits codepkg.Limits
		want   []string
	}{
		"not an archive": {code: func(dir string) *executor.Code { return codeOf([]byte("garbage"), dir) }, want: []string{"not a gzip stream"}},
		"unreadable": {code: func(dir string) *executor.Code {
			c := codeOf(nil, dir)
			c.Open = func(context.Context) (io.ReadCloser, error) {
				return nil, os.ErrNotExist
			}
			return c
		}, want: []string{"file does not exist"}},
		"size": {code: func(dir string) *executor.Code { return codeOf(zeros, dir) }, limits: codepkg.Limits{MaxBytes: 1 << 20},
			want: []string{"more than 1.0 MiB, this server's limit (reached at data/zeros.bin, 8.0 MiB)", ".trainyardignore", "code.max_unpacked"}},
		"files": {code: func(dir string) *executor.Code {
			return codeOf(tarball(t, map[string]string{"a.py": "a", "b.py": "b", "c.py": "c"}), dir)
		}, limits: codepkg.Limits{MaxFiles: 2}, want: []string{"more than 2 entries", ".trainyardignore", "code.max_files"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			self, _ := os.Executable()
			cfg := testConfig(self)
			cfg.Unpack = func(r io.Reader, dest string) error { return codepkg.Unpack(r, dest, tc.limits) }
			e, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			root := t.TempDir()
			l := executor.Launch{Ref: executor.Ref{JobID: 1, Attempt: 1}, Argv: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin"},
				WorkDir: filepath.Join(root, "work"), Dir: filepath.Join(root, "attempt"), LogPath: filepath.Join(root, "attempt", "output.log")}
			l.Code = tc.code(l.WorkDir)
			err = e.Launch(context.Background(), l)
			if err == nil {
				t.Fatal("Launch succeeded")
			}
			for _, w := range append(tc.want, "code package sha256:test") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if ents, _ := os.ReadDir(root); len(ents) != 0 {
				t.Errorf("a failed unpack left %v behind", ents)
			}
		})
	}
}

// An existing directory is an earlier unpack of the attempt (a launch
// that reattaches): it is left alone, even a link the job put there.
func TestUnpackLeavesAnEarlierUnpack(t *testing.T) {
	e := newExec(t)
	dir := filepath.Join(t.TempDir(), "work")
	if err := os.Symlink(t.TempDir(), dir); err != nil {
		t.Fatal(err)
	}
	if err := e.unpackCode(context.Background(), codeOf([]byte("garbage"), dir)); err != nil {
		t.Errorf("unpack over an existing directory: %v", err)
	}
}

// Output directories that cannot be created fail the launch with
// ErrOutputs, which the control loop records as ArtifactWriteFailed.
func TestUnwritableOutputsFailTheLaunch(t *testing.T) {
	e := newExec(t)
	root := t.TempDir()
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l := executor.Launch{Ref: executor.Ref{JobID: 1, Attempt: 1}, Argv: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin"},
		WorkDir: filepath.Join(root, "work"), Dir: filepath.Join(root, "attempt"), LogPath: filepath.Join(root, "attempt", "output.log"),
		Writable: []string{filepath.Join(file, "outputs")}}
	if err := e.Launch(context.Background(), l); !errors.Is(err, executor.ErrOutputs) {
		t.Errorf("Launch = %v, want ErrOutputs", err)
	}
}
