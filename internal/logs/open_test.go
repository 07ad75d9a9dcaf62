package logs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// within fails the test when f does not return in time: opening a fifo for
// reading waits for a writer forever.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s blocked (on a fifo?)", what)
	}
}

// A job whose process can write in its attempt directory replaces its
// log by a link to a file the server can read (here a secret elsewhere,
// or another job's log), or by a fifo: reading the log serves neither and
// never blocks.
func TestLogsAreReadWithoutFollowingLinks(t *testing.T) {
	l := Layout{Root: filepath.Join(t.TempDir(), "runs")}
	secret := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(secret, []byte("root:secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{1, 2, 3, 4} {
		if err := os.MkdirAll(l.AttemptDir(id, 1), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(l.LogPath(1, 1), AppendLine(nil, time.Now(), Stdout, []byte("job one's own line")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, l.LogPath(2, 1)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../1/1/output.log", l.LogPath(3, 1)); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(l.LogPath(4, 1), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := l.CopyLog(context.Background(), &out, 1, 1, Options{}); err != nil || out.String() != "job one's own line\n" {
		t.Fatalf("own log: %q, %v", out.String(), err)
	}
	for _, id := range []int64{2, 3, 4} {
		within(t, "reading a planted log", func() {
			var out bytes.Buffer
			if err := l.CopyLog(context.Background(), &out, id, 1, Options{Tail: 5}); err == nil || out.Len() > 0 {
				t.Errorf("job %d: copied %q (err %v)", id, out.String(), err)
			}
			if lines, err := l.TailLog(id, 1, 5); err == nil || len(lines) > 0 {
				t.Errorf("job %d: tail %v (err %v)", id, lines, err)
			}
			if f, err := l.Open(id, 1, "output.log"); err == nil {
				f.Close()
				t.Errorf("job %d: opened", id)
			}
			if err := Copy(context.Background(), &out, l.LogPath(id, 1), Options{}); err == nil || strings.Contains(out.String(), "secret") {
				t.Errorf("job %d by path: copied %q (err %v)", id, out.String(), err)
			}
		})
	}
	// Through ".." out of the root: not even the file name gets out.
	if f, err := l.Open(1, 1, "../../../"+filepath.Base(filepath.Dir(secret))+"/shadow"); err == nil {
		f.Close()
		t.Error("a name with .. opened a file outside the root")
	}
}

// Expiry writes its record without following a link left in its place,
// and a planted record link is not read.
func TestExpireDoesNotWriteThroughLinks(t *testing.T) {
	l := Layout{Root: filepath.Join(t.TempDir(), "runs")}
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(l.WorkDir(7, 1), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(l.jobDir(7), expiredFile+".tmp")); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(l.jobDir(8), 0o755)
	if err := os.Symlink(victim, filepath.Join(l.jobDir(8), expiredFile)); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Expired(8); ok {
		t.Error("a linked expiry record was read")
	}
	removed, err := l.Expire(7, Expiry{DeletedAt: time.Now(), Retention: time.Hour})
	if err != nil || !removed {
		t.Fatalf("expire: %v %v", removed, err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatalf("the linked file now holds %q", b)
	}
	if e, ok := l.Expired(7); !ok || e.Retention != time.Hour {
		t.Fatalf("expired = %+v %v", e, ok)
	}
	if _, err := os.Stat(l.AttemptDir(7, 1)); !os.IsNotExist(err) {
		t.Fatalf("attempt directory still there: %v", err)
	}
}
