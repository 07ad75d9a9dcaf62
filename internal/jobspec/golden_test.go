package jobspec

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trainyard/internal/domain"
)

var update = flag.Bool("update", false, "rewrite testdata/**/*.golden from the current output")

// caseFiles lists the spec documents under dir.
func caseFiles(t testing.TB, dir string) []string {
	t.Helper()
	var files []string
	for _, pat := range []string{"*.yaml", "*.json"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Fatalf("no test cases in %s", dir)
	}
	return files
}

// readCase returns a case document and the overrides named in its
// "# set: key=value" comment lines.
func readCase(t testing.TB, file string) ([]byte, []string) {
	t.Helper()
	doc, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var sets []string
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# set: "); ok {
			sets = append(sets, v)
		}
	}
	return doc, sets
}

// checkGolden compares got with file, or rewrites file under -update.
func checkGolden(t *testing.T, file string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/jobspec -update to create it)", err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("output differs from %s (-want +got):\n-%s\n+%s", file, want, got)
	}
}

func goldenName(file string) string {
	return strings.TrimSuffix(file, filepath.Ext(file)) + ".golden"
}

// TestInvalidGolden loads every invalid case and compares the full list of
// problems, one "path (line N): message" per line, with its golden file.
func TestInvalidGolden(t *testing.T) {
	files := caseFiles(t, "testdata/invalid")
	if len(files) < 25 {
		t.Fatalf("only %d invalid cases; keep at least 25", len(files))
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			doc, sets := readCase(t, file)
			_, err := Load(doc, sets)
			if err == nil {
				t.Fatal("Load succeeded; want errors")
			}
			var fes domain.FieldErrors
			if !errors.As(err, &fes) || len(fes) == 0 {
				t.Fatalf("error is %T %v; want non-empty domain.FieldErrors", err, err)
			}
			if !errors.Is(err, domain.ErrInvalid) {
				t.Errorf("errors.Is(err, ErrInvalid) = false")
			}
			var b strings.Builder
			for _, fe := range fes {
				if fe.Path == "" || fe.Message == "" {
					t.Errorf("field error without path or message: %+v", fe)
				}
				b.WriteString(fe.Error())
				b.WriteByte('\n')
			}
			checkGolden(t, goldenName(file), []byte(b.String()))
		})
	}
}

// TestValidGolden loads every valid case and compares its canonical JSON
// with the golden file; the canonical JSON must load back to itself.
func TestValidGolden(t *testing.T) {
	for _, file := range caseFiles(t, "testdata/valid") {
		t.Run(filepath.Base(file), func(t *testing.T) {
			doc, sets := readCase(t, file)
			s, err := Load(doc, sets)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			c, _ := Canonical(s)
			checkGolden(t, goldenName(file), append(c, '\n'))
			assertRoundTrip(t, s)
		})
	}
}

// assertRoundTrip checks Canonical(Load(Canonical(s))) == Canonical(s).
func assertRoundTrip(t testing.TB, s domain.Spec) {
	t.Helper()
	c1, h1 := Canonical(s)
	s2, err := Load(c1, nil)
	if err != nil {
		t.Fatalf("canonical JSON does not load back: %v\n%s", err, c1)
	}
	c2, h2 := Canonical(s2)
	if !bytes.Equal(c1, c2) || h1 != h2 {
		t.Fatalf("canonical JSON changed on a round trip:\n%s\n%s", c1, c2)
	}
}
