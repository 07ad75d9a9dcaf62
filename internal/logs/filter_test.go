package logs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

func TestCopyFilters(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	var b []byte
	for i, l := range []struct{ stream, text string }{
		{Stdout, "step 1 loss 2.0"},
		{System, "started train.py"},
		{Stderr, "warning: slow loader"},
		{Stdout, "step 2 loss 1.5"},
		{Stdout, "step 3 loss 1.1"},
		{Stderr, "error: bad batch"},
	} {
		b = AppendLine(b, t0.Add(time.Duration(i)*time.Minute), l.stream, []byte(l.text))
	}
	b = append(b, "a foreign line without a timestamp\n"...)
	p := filepath.Join(t.TempDir(), "output.log")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		opts Options
		want string
	}{
		"grep":           {Options{Grep: regexp.MustCompile(`loss`)}, "step 1 loss 2.0\nstep 2 loss 1.5\nstep 3 loss 1.1\n"},
		"grep with tail": {Options{Grep: regexp.MustCompile(`loss`), Tail: 2}, "step 2 loss 1.5\nstep 3 loss 1.1\n"},
		"grep never matches system lines without timestamps": {
			Options{Grep: regexp.MustCompile(`started`)}, ""},
		"grep sees system lines with timestamps": {
			Options{Grep: regexp.MustCompile(`started`), Timestamps: true}, "2026-01-02T03:01:00.000000000Z system started train.py\n"},
		"since": {Options{Since: t0.Add(4 * time.Minute)}, "step 3 loss 1.1\nerror: bad batch\n"},
		"since and grep and tail": {
			Options{Since: t0.Add(2 * time.Minute), Grep: regexp.MustCompile(`^(step|error)`), Tail: 2}, "step 3 loss 1.1\nerror: bad batch\n"},
		"since after the end":                         {Options{Since: t0.Add(time.Hour)}, ""},
		"tail without filters keeps the foreign line": {Options{Tail: 1}, "a foreign line without a timestamp\n"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			if err := Copy(context.Background(), &out, p, tt.opts); err != nil {
				t.Fatal(err)
			}
			if out.String() != tt.want {
				t.Errorf("got %q, want %q", out.String(), tt.want)
			}
		})
	}
}

func TestExpire(t *testing.T) {
	l := Layout{Root: t.TempDir()}
	for _, a := range []int{1, 2} {
		if err := os.MkdirAll(l.WorkDir(7, a), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(l.LogPath(7, a), []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	other := filepath.Join(l.Root, "7", "notes.txt") // not an attempt directory
	if err := os.WriteFile(other, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Expired(7); ok {
		t.Fatal("expired before Expire")
	}
	at := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	removed, err := l.Expire(7, Expiry{DeletedAt: at, Retention: 30 * 24 * time.Hour})
	if err != nil || !removed {
		t.Fatalf("Expire = %v, %v; want true, nil", removed, err)
	}
	for _, a := range []int{1, 2} {
		if _, err := os.Stat(l.AttemptDir(7, a)); !os.IsNotExist(err) {
			t.Errorf("attempt %d directory still there (%v)", a, err)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a file that is not an attempt directory was touched: %v", err)
	}
	e, ok := l.Expired(7)
	if !ok || !e.DeletedAt.Equal(at) || RetentionString(e.Retention) != "30d" {
		t.Errorf("Expired = %+v, %v", e, ok)
	}
	if removed, err := l.Expire(7, Expiry{}); removed || err != nil {
		t.Errorf("second Expire = %v, %v; want false, nil", removed, err)
	}
	if removed, err := l.Expire(8, Expiry{}); removed || err != nil {
		t.Errorf("Expire of a job without directory = %v, %v", removed, err)
	}
	if _, ok := l.Expired(8); ok {
		t.Error("a job without directory is reported expired")
	}
}

func TestRetentionString(t *testing.T) {
	for d, want := range map[time.Duration]string{30 * 24 * time.Hour: "30d", 36 * time.Hour: "36h", 90 * time.Minute: "1h30m"} {
		if got := RetentionString(d); got != want {
			t.Errorf("RetentionString(%v) = %q, want %q", d, got, want)
		}
	}
}
