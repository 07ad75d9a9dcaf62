package lazyre

import "testing"

func TestCompilesOnFirstUse(t *testing.T) {
	r := New(`^a(?P<b>b+)$`)
	if !r.MatchString("abb") || r.MatchString("ab c") {
		t.Fatal("MatchString disagrees with the expression")
	}
	if m := r.FindStringSubmatch("abbb"); len(m) != 2 || m[r.SubexpIndex("b")] != "bbb" {
		t.Fatalf("FindStringSubmatch = %q", m)
	}
	if r.Regexp() != r.Regexp() {
		t.Fatal("compiled twice")
	}
}

func TestCompileAllReportsABadPattern(t *testing.T) {
	if err := CompileAll(); err != nil {
		t.Fatalf("good patterns: %v", err)
	}
	New(`(`) // no panic until used
	if err := CompileAll(); err == nil {
		t.Fatal("CompileAll accepted an unbalanced (")
	}
	mu.Lock()
	all = all[:len(all)-1]
	mu.Unlock()
}
