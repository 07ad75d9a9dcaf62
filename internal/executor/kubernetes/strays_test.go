package kubernetes_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"trainyard/internal/executor"
	"trainyard/internal/executor/kubernetes"
)

// TestStrays: a Job no executor launched or adopted is a stray (a server
// releases it unless its attempt is still active); once an executor
// adopts it by launching it again, it is not; nor is a Job younger than
// the age asked.
func TestStrays(t *testing.T) {
	w := newWorld(t, nil)
	l := w.launch(t, []string{"TRAINYARD_KWOK_BLOCK=1"}, nil)
	w.h.Wait(t, l.Ref, executor.Started)
	if s := w.ex.Strays(0); len(s) != 0 {
		t.Errorf("Strays = %v while the executor runs the attempt", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fresh, err := kubernetes.New(ctx, kubernetes.Config{REST: w.c.Config, Namespace: w.ns, Image: "example.com/trainer:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fresh.Close() })
	if s := fresh.Strays(0); !slices.Contains(s, l.Ref) {
		t.Errorf("Strays of a new executor = %v, want %v", s, l.Ref)
	}
	if s := fresh.Strays(time.Hour); len(s) != 0 {
		t.Errorf("Strays older than an hour = %v, want none", s)
	}
	if err := fresh.Launch(ctx, l); err != nil { // adopts it
		t.Fatal(err)
	}
	if s := fresh.Strays(0); slices.Contains(s, l.Ref) {
		t.Errorf("Strays after adopting = %v", s)
	}
	if err := fresh.Stop(ctx, l.Ref, executor.StopRequest{Grace: time.Second}); err != nil {
		t.Fatal(err)
	}
}
