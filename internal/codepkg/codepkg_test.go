package codepkg

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// writeTree creates files (path → content) under dir; a content starting
// with "->" makes a symbolic link to the rest.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// paths lists what Build would package from dir.
func paths(t *testing.T, dir string) []string {
	t.Helper()
	es, err := collect(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.rel)
	}
	return out
}

func build(t *testing.T, dir string, opts Options) Package {
	t.Helper()
	opts.TempDir = t.TempDir()
	p, err := Build(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Remove() })
	return p
}

func TestHashStable(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"train.py": "print('hi')\n", "lib/util.py": "x = 1\n", "lib/data/a.txt": "a",
		"run.sh": "#!/bin/sh\necho run\n", "link": "->lib/util.py",
	})
	if err := os.Chmod(filepath.Join(dir, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	first := build(t, dir, Options{NoGit: true})
	if first.Files != 5 || !strings.HasPrefix(first.SHA256, "sha256:") || first.Size <= 0 {
		t.Fatalf("package = %+v, want 5 files, a sha256 and a size", first)
	}
	data, err := os.ReadFile(first.Path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != first.Size {
		t.Errorf("Size = %d, file has %d bytes", first.Size, len(data))
	}
	if again := build(t, dir, Options{NoGit: true}); again.SHA256 != first.SHA256 {
		t.Fatalf("two builds of one tree: %s then %s", first.SHA256, again.SHA256)
	}

	// Times, group/other permission bits and the order files were created
	// in do not matter.
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, f := range []string{"train.py", "lib/util.py", "lib", "run.sh"} {
		if err := os.Chtimes(filepath.Join(dir, f), old, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "train.py"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "run.sh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if touched := build(t, dir, Options{NoGit: true}); touched.SHA256 != first.SHA256 {
		t.Errorf("after touching times and modes: %s, want %s", touched.SHA256, first.SHA256)
	}
	other := t.TempDir()
	writeTree(t, other, map[string]string{"link": "->lib/util.py", "lib/data/a.txt": "a", "lib/util.py": "x = 1\n",
		"run.sh": "#!/bin/sh\necho run\n", "train.py": "print('hi')\n"})
	os.Chmod(filepath.Join(other, "run.sh"), 0o755)
	if copy := build(t, other, Options{NoGit: true}); copy.SHA256 != first.SHA256 {
		t.Errorf("the same tree elsewhere: %s, want %s", copy.SHA256, first.SHA256)
	}

	// Content and the executable bit do.
	os.Chmod(filepath.Join(dir, "run.sh"), 0o644)
	if p := build(t, dir, Options{NoGit: true}); p.SHA256 == first.SHA256 {
		t.Error("dropping the executable bit kept the hash")
	}
	os.Chmod(filepath.Join(dir, "run.sh"), 0o755)
	writeTree(t, dir, map[string]string{"lib/data/a.txt": "b"})
	if p := build(t, dir, Options{NoGit: true}); p.SHA256 == first.SHA256 {
		t.Error("changing a file kept the hash")
	}
}

func TestIgnorePatterns(t *testing.T) {
	tests := map[string]struct {
		patterns string
		path     string
		dir      bool
		want     bool
	}{
		"name at any depth":            {"*.pyc", "a/b/c.pyc", false, true},
		"name at the root":             {"*.pyc", "c.pyc", false, true},
		"no match":                     {"*.pyc", "c.py", false, false},
		"star does not cross slash":    {"a/*.py", "a/b/c.py", false, false},
		"anchored in the middle":       {"a/*.py", "a/c.py", false, true},
		"anchored only at its dir":     {"a/*.py", "x/a/c.py", false, false},
		"leading slash anchors":        {"/build", "build", true, true},
		"leading slash not deeper":     {"/build", "src/build", true, false},
		"unanchored dir at any depth":  {"build", "src/build", true, true},
		"dir only matches dirs":        {"logs/", "logs", true, true},
		"dir only skips files":         {"logs/", "logs", false, false},
		"negation re-includes":         {"*.log\n!keep.log", "keep.log", false, false},
		"negation order matters":       {"!keep.log\n*.log", "keep.log", false, true},
		"leading double star":          {"**/cache", "a/b/cache", true, true},
		"leading double star at root":  {"**/cache", "cache", true, true},
		"trailing double star":         {"data/**", "data/x/y.bin", false, true},
		"trailing double star not dir": {"data/**", "data", true, false},
		"middle double star zero dirs": {"a/**/b", "a/b", false, true},
		"middle double star many dirs": {"a/**/b", "a/x/y/b", false, true},
		"question mark":                {"file?.txt", "file1.txt", false, true},
		"character class":              {"file[0-9].txt", "file7.txt", false, true},
		"negated class":                {"file[!0-9].txt", "file7.txt", false, false},
		"negated class matches":        {"file[!0-9].txt", "filex.txt", false, true},
		"comment":                      {"# *.txt", "a.txt", false, false},
		"escaped hash":                 {`\#notes`, "#notes", false, true},
		"escaped bang":                 {`\!important`, "!important", false, true},
		"trailing spaces trimmed":      {"a.txt   ", "a.txt", false, true},
		"blank lines":                  {"\n\n  \n", "a.txt", false, false},
		"crlf":                         {"*.tmp\r\n", "x.tmp", false, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ig := &ignorer{git: []ignoreFile{{patterns: parseIgnore([]byte(tc.patterns))}}}
			if got := ig.ignored(tc.path, tc.dir); got != tc.want {
				t.Errorf("patterns %q, path %q (dir %v): ignored = %v, want %v", tc.patterns, tc.path, tc.dir, got, tc.want)
			}
		})
	}
}

func TestIgnoreFilesInTree(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		".gitignore":           "*.log\n/out/\ndata/\n!important.log\nsecret.txt\n",
		".trainyardignore":     "*.ckpt\n!secret.txt\nnotes.md\n",
		"train.py":             "x",
		"run.log":              "x",
		"important.log":        "x",
		"notes.md":             "x",
		"secret.txt":           "x", // git ignores it, .trainyardignore re-includes it
		"model.ckpt":           "x",
		"out/result":           "x",
		"src/out/kept.py":      "x", // /out/ is anchored at the root
		"data/big.bin":         "x",
		"src/data/also.bin":    "x", // data/ matches at any depth
		"src/.gitignore":       "*.tmp\n!keep.log\n",
		"src/a.tmp":            "x",
		"src/keep.log":         "x", // re-included by the deeper file
		"src/b.log":            "x",
		"src/.trainyardignore": "/local.cfg\n",
		"src/local.cfg":        "x",
		"local.cfg":            "x", // the anchor is src/, not the root
		".git/config":          "x",
		"sub/.git":             "gitdir: elsewhere", // a submodule's .git file
	})
	got := paths(t, dir)
	want := []string{".gitignore", ".trainyardignore", "important.log", "local.cfg", "secret.txt",
		"src/.gitignore", "src/.trainyardignore", "src/keep.log", "src/out/kept.py", "train.py"}
	if !slices.Equal(got, want) {
		t.Errorf("packaged %q,\nwant     %q", got, want)
	}

	// .git/info/exclude applies like a root .gitignore.
	writeTree(t, dir, map[string]string{".git/info/exclude": "train.py\n"})
	if got := paths(t, dir); slices.Contains(got, "train.py") {
		t.Errorf(".git/info/exclude was not applied: %q", got)
	}
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com",
		"-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestGitState(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"train.py": "v1", ".gitignore": "*.log\n", "sub/x.py": "x"})
	git(t, dir, "init", "-q")

	// Before the first commit: no commit, but untracked files make it dirty.
	if commit, dirty, err := gitState(dir); err != nil || commit != "" || !dirty {
		t.Errorf("fresh repo: commit %q dirty %v err %v, want \"\", true, nil", commit, dirty, err)
	}
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "one")
	head := git(t, dir, "rev-parse", "HEAD")

	p := build(t, dir, Options{})
	if p.Commit != head || p.Dirty {
		t.Errorf("clean tree: commit %q dirty %v, want %q false", p.Commit, p.Dirty, head)
	}
	// An ignored file does not make it dirty.
	writeTree(t, dir, map[string]string{"run.log": "x"})
	if p := build(t, dir, Options{}); p.Dirty {
		t.Error("an ignored file made the tree dirty")
	}
	// An untracked file does.
	writeTree(t, dir, map[string]string{"new.py": "x"})
	if p := build(t, dir, Options{}); !p.Dirty {
		t.Error("an untracked file did not make the tree dirty")
	}
	os.Remove(filepath.Join(dir, "new.py"))
	// A modified tracked file does.
	writeTree(t, dir, map[string]string{"train.py": "v2"})
	if p := build(t, dir, Options{}); !p.Dirty || p.Commit != head {
		t.Errorf("modified file: commit %q dirty %v, want %q true", p.Commit, p.Dirty, head)
	}
	// A subdirectory is judged on its own files.
	if p := build(t, filepath.Join(dir, "sub"), Options{}); p.Dirty || p.Commit != head {
		t.Errorf("clean subdirectory of a dirty repo: commit %q dirty %v, want %q false", p.Commit, p.Dirty, head)
	}

	// Not a git tree: no commit, not dirty, no error.
	plain := t.TempDir()
	writeTree(t, plain, map[string]string{"a.py": "x"})
	if p := build(t, plain, Options{}); p.Commit != "" || p.Dirty {
		t.Errorf("plain directory: commit %q dirty %v", p.Commit, p.Dirty)
	}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"a.py": "print(1)", "pkg/mod.py": "y", "pkg/link.py": "->mod.py", "dirlink": "->pkg"})
	os.Chmod(filepath.Join(dir, "a.py"), 0o750)
	var buf bytes.Buffer
	p, err := Write(&buf, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Files != 4 || p.Size != int64(buf.Len()) || p.Bytes != int64(len("print(1)")+1) {
		t.Errorf("package = %+v", p)
	}
	dest := filepath.Join(t.TempDir(), "work")
	if err := Unpack(bytes.NewReader(buf.Bytes()), dest, Limits{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dest, "pkg", "link.py"))
	if err != nil || string(b) != "y" {
		t.Errorf("pkg/link.py = %q, %v", b, err)
	}
	if st, err := os.Stat(filepath.Join(dest, "a.py")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("a.py mode = %v, %v; want 0755", st.Mode(), err)
	}
	if st, err := os.Stat(filepath.Join(dest, "pkg", "mod.py")); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("pkg/mod.py mode = %v, %v; want 0644", st.Mode(), err)
	}
	if target, err := os.Readlink(filepath.Join(dest, "dirlink")); err != nil || target != "pkg" {
		t.Errorf("dirlink -> %q, %v", target, err)
	}
}

func TestBuildRefusesEscapingLinks(t *testing.T) {
	for name, target := range map[string]string{"absolute": "/etc/passwd", "relative": "../../outside", "through link": "up/../.."} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, map[string]string{"a.py": "x", "sub/up": "->..", "sub/bad": "->" + target})
			_, err := Build(dir, Options{NoGit: true, TempDir: t.TempDir()})
			if err == nil || !strings.Contains(err.Error(), "sub/bad") || !strings.Contains(err.Error(), ignoreFileName) {
				t.Fatalf("err = %v, want one naming sub/bad and suggesting %s", err, ignoreFileName)
			}
			// Excluding it fixes the build.
			writeTree(t, dir, map[string]string{ignoreFileName: "sub/bad\n"})
			if _, err := Build(dir, Options{NoGit: true, TempDir: t.TempDir()}); err != nil {
				t.Fatalf("after excluding the link: %v", err)
			}
		})
	}
}

func TestSizeLimit(t *testing.T) {
	dir := t.TempDir()
	big := make([]byte, 256<<10)
	rand.Read(big) // incompressible
	writeTree(t, dir, map[string]string{"small.py": "x", "weights.bin": string(big), "mid.bin": string(big[:64<<10])})
	tmp := t.TempDir()
	_, err := Build(dir, Options{MaxSize: 100 << 10, NoGit: true, TempDir: tmp})
	var tl *TooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want a *TooLargeError", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "weights.bin (256.0 KiB)") || !strings.Contains(msg, ".trainyardignore") ||
		strings.Index(msg, "weights.bin") > strings.Index(msg, "mid.bin") {
		t.Errorf("message %q should name the largest files, biggest first, and suggest .trainyardignore", msg)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("a failed build left %d temporary files", len(left))
	}
	if _, err := Build(dir, Options{MaxSize: -1, NoGit: true, TempDir: tmp}); err != nil {
		t.Errorf("no limit: %v", err)
	}
	if _, err := Build(dir, Options{NoGit: true, TempDir: tmp}); err != nil {
		t.Errorf("default limit: %v", err)
	}
}

// archive builds a tar.gz from headers (file content is "x" repeated Size).
func archive(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range hdrs {
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func TestUnpackRefusesUnsafeArchives(t *testing.T) {
	file := func(name string) *tar.Header { return &tar.Header{Name: name, Typeflag: tar.TypeReg, Size: 1} }
	link := func(name, target string) *tar.Header {
		return &tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target}
	}
	tests := map[string][]*tar.Header{
		"parent path":             {file("../evil")},
		"parent in the middle":    {file("a/../../evil")},
		"absolute path":           {file("/tmp/evil")},
		"absolute link":           {link("l", "/etc")},
		"link climbing out":       {link("l", "../..")},
		"deep link climbing out":  {link("a/b/l", "../../../evil")},
		"file through a link":     {link("l", "."), file("l/evil")},
		"link through a link":     {link("s/up", ".."), link("s/l", "up/../..")},
		"link loop":               {link("a", "b"), link("b", "a/x")},
		"char device":             {{Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}},
		"block device":            {{Name: "dev", Typeflag: tar.TypeBlock}},
		"fifo":                    {{Name: "fifo", Typeflag: tar.TypeFifo}},
		"hard link":               {file("a"), {Name: "h", Typeflag: tar.TypeLink, Linkname: "a"}},
		"duplicate":               {file("a"), file("a")},
		"duplicate after cleanup": {file("a/b"), file("a/./b")},
		"backslash":               {file(`..\evil`)},
	}
	for name, hdrs := range tests {
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			dest := filepath.Join(parent, "work")
			err := Unpack(bytes.NewReader(archive(t, hdrs...)), dest, Limits{})
			if !errors.Is(err, ErrUnsafe) {
				t.Fatalf("err = %v, want ErrUnsafe", err)
			}
			ents, _ := os.ReadDir(parent)
			if len(ents) != 1 || ents[0].Name() != "work" {
				t.Errorf("something was written beside the destination: %v", ents)
			}
		})
	}
	// Not a gzip stream at all.
	if err := Unpack(strings.NewReader("not an archive"), t.TempDir(), Limits{}); err == nil {
		t.Error("Unpack accepted garbage")
	}
	// A truncated archive fails.
	good := archive(t, &tar.Header{Name: "f", Typeflag: tar.TypeReg, Size: 4096})
	if err := Unpack(bytes.NewReader(good[:len(good)/2]), filepath.Join(t.TempDir(), "w"), Limits{}); err == nil {
		t.Error("Unpack accepted a truncated archive")
	}
	// Links that stay inside are fine, also through other links.
	ok := archive(t, &tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Size: 1}, link("d/self", "."), link("l", "d/self/f"))
	if err := Unpack(bytes.NewReader(ok), filepath.Join(t.TempDir(), "w"), Limits{}); err != nil {
		t.Errorf("safe links: %v", err)
	}
}

func TestParseHash(t *testing.T) {
	good := "sha256:" + strings.Repeat("ab", 32)
	if hex, err := ParseHash(good); err != nil || hex != strings.Repeat("ab", 32) {
		t.Errorf("ParseHash(%q) = %q, %v", good, hex, err)
	}
	if got := BlobKey(good); got != "code/sha256/"+strings.Repeat("ab", 32)+".tar.gz" {
		t.Errorf("BlobKey = %q", got)
	}
	for _, bad := range []string{"", "sha256:", strings.Repeat("ab", 32), "sha256:" + strings.Repeat("AB", 32),
		"sha256:" + strings.Repeat("ab", 31), "md5:" + strings.Repeat("ab", 32), "sha256:../" + strings.Repeat("a", 61)} {
		if _, err := ParseHash(bad); err == nil {
			t.Errorf("ParseHash(%q) accepted it", bad)
		}
	}
}

// zeros is a tar.gz of small "train.py" and then name holding size zero
// bytes: a package that compresses about a thousandfold.
func zeros(t *testing.T, name string, size int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "train.py", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
	tw.Write([]byte("x"))
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Size: size, Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(tw, zeroReader{}, size); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// Packages that unpack to more than the limits allow are refused with the
// limit and the way out, and a file over what is left is refused before
// any of it is written.
func TestUnpackRefusesBombs(t *testing.T) {
	emptyFiles := func(n int) []byte {
		hdrs := make([]*tar.Header, n)
		for i := range hdrs {
			hdrs[i] = &tar.Header{Name: fmt.Sprintf("f%d", i), Typeflag: tar.TypeReg}
		}
		return archive(t, hdrs...)
	}
	// A header declaring 3 GiB, the archive ending before its data.
	var declared bytes.Buffer
	zw := gzip.NewWriter(&declared)
	tar.NewWriter(zw).WriteHeader(&tar.Header{Name: "data/huge.bin", Typeflag: tar.TypeReg, Size: 3 << 30, Mode: 0o644})
	zw.Close()

	tests := map[string]struct {
		archive []byte
		lim     Limits
		want    []string
		absent  string // must not have been created
	}{
		"zeros over a configured size": {zeros(t, "data/zeros.bin", 8<<20), Limits{MaxBytes: 1 << 20},
			[]string{"more than 1.0 MiB, this server's limit (reached at data/zeros.bin, 8.0 MiB)", ".trainyardignore", "code.max_unpacked"}, "data/zeros.bin"},
		"declared size over the default": {declared.Bytes(), Limits{},
			[]string{"more than 2.0 GiB", "code.max_unpacked"}, "data/huge.bin"},
		"entries over a configured count": {emptyFiles(11), Limits{MaxFiles: 10},
			[]string{"more than 10 entries", ".trainyardignore", "code.max_files"}, "f10"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "work")
			err := Unpack(bytes.NewReader(tc.archive), dest, tc.lim)
			if !errors.Is(err, ErrUnsafe) {
				t.Fatalf("err = %v, want ErrUnsafe", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
			if _, err := os.Lstat(filepath.Join(dest, tc.absent)); !os.IsNotExist(err) {
				t.Errorf("%s was created: %v", tc.absent, err)
			}
		})
	}
	if n := len(tests["zeros over a configured size"].archive); n > 64<<10 {
		t.Errorf("the zeros package is %d bytes; the test wants a bomb", n)
	}
}

// The limits are inclusive, and zero means the defaults.
func TestUnpackLimits(t *testing.T) {
	if got := (Limits{}).withDefaults(); got != (Limits{MaxBytes: 2 << 30, MaxFiles: 100_000}) {
		t.Errorf("defaults = %+v", got)
	}
	if err := Unpack(bytes.NewReader(zeros(t, "z", 1023)), t.TempDir(), Limits{MaxBytes: 1024, MaxFiles: 2}); err != nil {
		t.Errorf("a package exactly at both limits: %v", err)
	}
}
