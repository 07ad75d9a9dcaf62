package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// envTests are the subtests of the Envs contract; Exercise runs them with
// the others.
var envTests = map[string]func(t *testing.T, s store.Store){
	"EnvsRoundTrip":        testEnvsRoundTrip,
	"EnvsVersions":         testEnvsVersions,
	"EnvsList":             testEnvsList,
	"EnvsDeprecate":        testEnvsDeprecate,
	"EnvsAudited":          testEnvsAudited,
	"EnvsConcurrentPut":    testEnvsConcurrentPut,
	"EnvsInvalidRejected":  testEnvsInvalid,
	"EnvsEmptyDefinitions": testEnvsEmpty,
}

// storedEnv returns an environment whose fields name it, so a mix-up
// between rows shows in the diff.
func storedEnv(name string, version int) domain.Environment {
	e := domain.Environment{
		Name: name, Version: version,
		Image:       fmt.Sprintf("registry.example.com/%s:%d", name, version),
		PathPrefix:  []string{fmt.Sprintf("/opt/%s/%d/bin", name, version), "/opt/shared/bin"},
		Vars:        map[string]string{"ENV_NAME": name, "ENV_VERSION": fmt.Sprint(version), "EMPTY": ""},
		Check:       []string{"python3", "-c", "import torch; print('" + name + "')"},
		Description: fmt.Sprintf("%s v%d: ünïcode and\nnewlines", name, version),
		CreatedBy:   "user:alice", CreatedAt: at(version),
	}
	e.Digest = domain.EnvDigest(e)
	return e
}

func putEnv(t *testing.T, s store.Store, e domain.Environment) {
	t.Helper()
	if err := s.PutEnv(context.Background(), e, setupAudit); err != nil {
		t.Fatalf("PutEnv(%s): %v", e.Ref(), err)
	}
}

func getEnv(t *testing.T, s store.Store, name string, version int) domain.Environment {
	t.Helper()
	got, err := s.GetEnv(context.Background(), name, version)
	if err != nil {
		t.Fatalf("GetEnv(%q, %d): %v", name, version, err)
	}
	return got
}

func testEnvsRoundTrip(t *testing.T, s store.Store) {
	want := storedEnv("pytorch-2.4", 1)
	putEnv(t, s, want)
	if d := diff(want, getEnv(t, s, "pytorch-2.4", 0)); d != "" {
		t.Errorf("GetEnv (latest) differs from what was put:%s", d)
	}
	if d := diff(want, getEnv(t, s, "pytorch-2.4", 1)); d != "" {
		t.Errorf("GetEnv version 1 differs from what was put:%s", d)
	}
	for _, c := range []struct {
		name    string
		version int
	}{{"other", 0}, {"pytorch-2.4", 2}, {"pytorch", 1}} {
		if _, err := s.GetEnv(context.Background(), c.name, c.version); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetEnv(%q, %d) = %v, want ErrNotFound", c.name, c.version, err)
		}
	}
}

func testEnvsVersions(t *testing.T, s store.Store) {
	ctx := context.Background()
	putEnv(t, s, storedEnv("e", 1))
	for _, v := range []int{1, 3} {
		if err := s.PutEnv(ctx, storedEnv("e", v), setupAudit); !errors.Is(err, store.ErrConflict) {
			t.Errorf("PutEnv version %d after version 1: err = %v, want ErrConflict", v, err)
		}
	}
	if err := s.PutEnv(ctx, storedEnv("new", 2), setupAudit); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutEnv version 2 of a new environment: err = %v, want ErrConflict", err)
	}
	v2 := storedEnv("e", 2)
	putEnv(t, s, v2)
	if d := diff(v2, getEnv(t, s, "e", 0)); d != "" {
		t.Errorf("latest after version 2:%s", d)
	}
	if d := diff(storedEnv("e", 1), getEnv(t, s, "e", 1)); d != "" {
		t.Errorf("version 1 changed:%s", d)
	}
	// A new version is never deprecated, whatever the caller passed.
	v3 := storedEnv("e", 3)
	v3.Deprecated, v3.DeprecatedReason, v3.DeprecatedAt = true, "sneaky", at(9)
	putEnv(t, s, v3)
	if got := getEnv(t, s, "e", 3); got.Deprecated || got.DeprecatedReason != "" || !got.DeprecatedAt.IsZero() {
		t.Errorf("a new version reads back deprecated: %+v", got)
	}
}

func testEnvsList(t *testing.T, s store.Store) {
	ctx := context.Background()
	if list, err := s.ListEnvs(ctx, ""); err != nil || len(list) != 0 {
		t.Fatalf("ListEnvs on an empty store = %v, %v", list, err)
	}
	putEnv(t, s, storedEnv("zeta", 1))
	putEnv(t, s, storedEnv("alpha", 1))
	putEnv(t, s, storedEnv("alpha", 2))
	putEnv(t, s, storedEnv("beta.x_y", 1))
	all, err := s.ListEnvs(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []domain.Environment{storedEnv("alpha", 1), storedEnv("alpha", 2), storedEnv("beta.x_y", 1), storedEnv("zeta", 1)}
	if len(all) != len(want) {
		t.Fatalf("ListEnvs(\"\") returned %d versions, want %d: %+v", len(all), len(want), all)
	}
	for i := range want {
		if d := diff(want[i], all[i]); d != "" {
			t.Errorf("ListEnvs(\"\")[%d]:%s", i, d)
		}
	}
	alpha, err := s.ListEnvs(ctx, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	if len(alpha) != 2 || alpha[0].Version != 1 || alpha[1].Version != 2 {
		t.Errorf("ListEnvs(alpha) = %+v, want versions 1 and 2", alpha)
	}
	if none, err := s.ListEnvs(ctx, "missing"); err != nil || len(none) != 0 {
		t.Errorf("ListEnvs(missing) = %+v, %v; want none", none, err)
	}
}

func testEnvsDeprecate(t *testing.T, s store.Store) {
	ctx := context.Background()
	for v := 1; v <= 3; v++ {
		putEnv(t, s, storedEnv("e", v))
	}
	marked, err := s.DeprecateEnv(ctx, "e", 2, "CVE in base image", at(10), setupAudit)
	if err != nil || !slices.Equal(marked, []int{2}) {
		t.Fatalf("DeprecateEnv(e, 2) = %v, %v; want [2]", marked, err)
	}
	got := getEnv(t, s, "e", 2)
	want := storedEnv("e", 2)
	want.Deprecated, want.DeprecatedReason, want.DeprecatedAt = true, "CVE in base image", at(10)
	if d := diff(want, got); d != "" {
		t.Errorf("deprecated version 2:%s", d)
	}
	if getEnv(t, s, "e", 1).Deprecated || getEnv(t, s, "e", 3).Deprecated {
		t.Errorf("deprecating version 2 touched another version")
	}
	// Deprecating again keeps the first reason and time.
	if marked, err := s.DeprecateEnv(ctx, "e", 2, "again", at(11), setupAudit); err != nil || len(marked) != 0 {
		t.Errorf("DeprecateEnv(e, 2) again = %v, %v; want no version marked", marked, err)
	}
	if got := getEnv(t, s, "e", 2); got.DeprecatedReason != "CVE in base image" || !got.DeprecatedAt.Equal(at(10)) {
		t.Errorf("a second deprecation changed version 2: %+v", got)
	}
	// Version 0: every version not deprecated yet.
	if marked, err := s.DeprecateEnv(ctx, "e", 0, "retired", at(12), setupAudit); err != nil || !slices.Equal(marked, []int{1, 3}) {
		t.Errorf("DeprecateEnv(e, 0) = %v, %v; want [1 3]", marked, err)
	}
	if got := getEnv(t, s, "e", 3); !got.Deprecated || got.DeprecatedReason != "retired" {
		t.Errorf("version 3 after deprecating all: %+v", got)
	}
	for _, c := range []struct {
		name    string
		version int
	}{{"e", 4}, {"missing", 0}, {"missing", 1}} {
		if _, err := s.DeprecateEnv(ctx, c.name, c.version, "x", at(13), setupAudit); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("DeprecateEnv(%q, %d) = %v, want ErrNotFound", c.name, c.version, err)
		}
	}
}

func testEnvsAudited(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.PutEnv(ctx, storedEnv("e", 1), auditRec(1, "env.write", "env/e")); err != nil {
		t.Fatal(err)
	}
	// A refused put records nothing.
	if err := s.PutEnv(ctx, storedEnv("e", 5), auditRec(2, "env.write", "env/e")); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("PutEnv of a skipped version = %v, want ErrConflict", err)
	}
	if _, err := s.DeprecateEnv(ctx, "e", 1, "old", at(3), auditRec(3, "env.write", "env/e@1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeprecateEnv(ctx, "none", 0, "old", at(4), auditRec(4, "env.write", "env/none")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeprecateEnv of a missing environment = %v, want ErrNotFound", err)
	}
	recs := auditLog(t, s)
	checkChain(t, recs)
	if len(recs) != 2 || recs[0].Target != "env/e" || recs[1].Target != "env/e@1" {
		t.Errorf("audit log = %+v, want the records of the stored version and of its deprecation", recs)
	}
}

func testEnvsConcurrentPut(t *testing.T, s store.Store) {
	const writers = 8
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		stored   int
		conflict int
	)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.PutEnv(context.Background(), storedEnv("race", 1), setupAudit)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				stored++
			case errors.Is(err, store.ErrConflict):
				conflict++
			default:
				t.Errorf("PutEnv: %v", err)
			}
		}()
	}
	wg.Wait()
	if stored != 1 || conflict != writers-1 {
		t.Errorf("%d writers of version 1: %d stored, %d conflicts; want exactly one stored", writers, stored, conflict)
	}
}

func testEnvsInvalid(t *testing.T, s store.Store) {
	ctx := context.Background()
	for name, edit := range map[string]func(*domain.Environment){
		"no name":      func(e *domain.Environment) { e.Name = "" },
		"version 0":    func(e *domain.Environment) { e.Version = 0 },
		"negative":     func(e *domain.Environment) { e.Version = -1 },
		"no digest":    func(e *domain.Environment) { e.Digest = "" },
		"both missing": func(e *domain.Environment) { e.Name, e.Digest = "", "" },
	} {
		e := storedEnv("e", 1)
		edit(&e)
		if err := s.PutEnv(ctx, e, setupAudit); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: PutEnv = %v, want ErrInvalid", name, err)
		}
	}
	if list, err := s.ListEnvs(ctx, ""); err != nil || len(list) != 0 {
		t.Errorf("after refused puts: ListEnvs = %+v, %v; want none", list, err)
	}
}

// An environment may define nothing (the built-in host); it reads back
// with nil lists and maps.
func testEnvsEmpty(t *testing.T, s store.Store) {
	host := domain.HostEnvironment(at(1))
	putEnv(t, s, host)
	got := getEnv(t, s, domain.HostEnv, 1)
	if d := diff(host, got); d != "" {
		t.Errorf("host@1:%s", d)
	}
	if got.PathPrefix != nil || got.Vars != nil || got.Check != nil {
		t.Errorf("empty definition reads back as %+v; want nil lists and map", got)
	}
}
