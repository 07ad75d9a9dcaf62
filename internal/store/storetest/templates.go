package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"trainyard/internal/store"
)

// templateTests are the subtests of the Templates contract; Exercise runs
// them with the others.
var templateTests = map[string]func(t *testing.T, s store.Store){
	"TemplatesRoundTrip":       testTemplatesRoundTrip,
	"TemplatesVersions":        testTemplatesVersions,
	"TemplatesList":            testTemplatesList,
	"TemplatesAudited":         testTemplatesAudited,
	"TemplatesConcurrentPut":   testTemplatesConcurrentPut,
	"TemplatesInvalidRejected": testTemplatesInvalid,
}

// storedTemplate returns a template whose body names it, so a mix-up
// between rows shows in the diff.
func storedTemplate(project, name string, version int) store.Template {
	body := fmt.Sprintf("# %s/%s v%d\nname: %s\nentrypoint: [\"${cmd}\"]\nvars: {cmd: echo}\n", project, name, version, name)
	return store.Template{
		Project: project, Name: name, Version: version, Body: []byte(body),
		Hash: fmt.Sprintf("sha256:%s-%s-%d", project, name, version), CreatedBy: "user:alice", CreatedAt: at(version),
	}
}

func putTemplate(t *testing.T, s store.Store, tm store.Template) {
	t.Helper()
	if err := s.PutTemplate(context.Background(), tm, setupAudit); err != nil {
		t.Fatalf("PutTemplate(%q/%q v%d): %v", tm.Project, tm.Name, tm.Version, err)
	}
}

func getTemplate(t *testing.T, s store.Store, project, name string, version int) store.Template {
	t.Helper()
	got, err := s.GetTemplate(context.Background(), project, name, version)
	if err != nil {
		t.Fatalf("GetTemplate(%q, %q, %d): %v", project, name, version, err)
	}
	return got
}

func testTemplatesRoundTrip(t *testing.T, s store.Store) {
	want := storedTemplate("vision", "resnet", 1)
	putTemplate(t, s, want)
	if d := diff(want, getTemplate(t, s, "vision", "resnet", 0)); d != "" {
		t.Errorf("GetTemplate (latest) differs from what was put:%s", d)
	}
	if d := diff(want, getTemplate(t, s, "vision", "resnet", 1)); d != "" {
		t.Errorf("GetTemplate version 1 differs from what was put:%s", d)
	}
	ctx := context.Background()
	for _, c := range []struct {
		project, name string
		version       int
	}{{"vision", "other", 0}, {"audio", "resnet", 0}, {"vision", "resnet", 2}} {
		if _, err := s.GetTemplate(ctx, c.project, c.name, c.version); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetTemplate(%q, %q, %d) = %v, want ErrNotFound", c.project, c.name, c.version, err)
		}
	}
}

func testTemplatesVersions(t *testing.T, s store.Store) {
	ctx := context.Background()
	putTemplate(t, s, storedTemplate("p", "t", 1))
	for _, v := range []int{1, 3, 0} {
		if err := s.PutTemplate(ctx, storedTemplate("p", "t", v), setupAudit); !errors.Is(err, store.ErrConflict) {
			t.Errorf("PutTemplate version %d after version 1: err = %v, want ErrConflict", v, err)
		}
	}
	if err := s.PutTemplate(ctx, storedTemplate("p", "new", 2), setupAudit); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutTemplate version 2 of a new template: err = %v, want ErrConflict", err)
	}
	v2 := storedTemplate("p", "t", 2)
	putTemplate(t, s, v2)
	if d := diff(v2, getTemplate(t, s, "p", "t", 0)); d != "" {
		t.Errorf("latest after version 2:%s", d)
	}
	// Older versions stay as they were.
	if d := diff(storedTemplate("p", "t", 1), getTemplate(t, s, "p", "t", 1)); d != "" {
		t.Errorf("version 1 changed:%s", d)
	}
	// The same name in another project is another template.
	putTemplate(t, s, storedTemplate("q", "t", 1))
	if got := getTemplate(t, s, "p", "t", 0); got.Version != 2 {
		t.Errorf("p/t latest version = %d, want 2", got.Version)
	}
}

func testTemplatesList(t *testing.T, s store.Store) {
	ctx := context.Background()
	if list, err := s.ListTemplates(ctx, ""); err != nil || len(list) != 0 {
		t.Fatalf("ListTemplates on an empty store = %v, %v", list, err)
	}
	putTemplate(t, s, storedTemplate("vision", "zeta", 1))
	putTemplate(t, s, storedTemplate("vision", "alpha", 1))
	putTemplate(t, s, storedTemplate("vision", "alpha", 2))
	putTemplate(t, s, storedTemplate("audio", "beta", 1))
	all, err := s.ListTemplates(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Template{storedTemplate("audio", "beta", 1), storedTemplate("vision", "alpha", 2), storedTemplate("vision", "zeta", 1)}
	if len(all) != len(want) {
		t.Fatalf("ListTemplates(\"\") returned %d templates, want %d: %+v", len(all), len(want), all)
	}
	for i := range want {
		if d := diff(want[i], all[i]); d != "" {
			t.Errorf("ListTemplates(\"\")[%d]:%s", i, d)
		}
	}
	vision, err := s.ListTemplates(ctx, "vision")
	if err != nil {
		t.Fatal(err)
	}
	if len(vision) != 2 || vision[0].Name != "alpha" || vision[0].Version != 2 || vision[1].Name != "zeta" {
		t.Errorf("ListTemplates(vision) = %+v, want alpha v2 and zeta v1", vision)
	}
}

func testTemplatesAudited(t *testing.T, s store.Store) {
	ctx := context.Background()
	rec := auditRec(1, "template.write", "template/vision/resnet")
	if err := s.PutTemplate(ctx, storedTemplate("vision", "resnet", 1), rec); err != nil {
		t.Fatal(err)
	}
	// A refused put records nothing.
	if err := s.PutTemplate(ctx,
		storedTemplate("vision", "resnet", 5), auditRec(2, "template.write", "template/vision/resnet")); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("PutTemplate of a skipped version = %v, want ErrConflict", err)
	}
	recs := auditLog(t, s)
	checkChain(t, recs)
	if len(recs) != 1 || recs[0].Action != "template.write" || recs[0].Target != "template/vision/resnet" {
		t.Errorf("audit log = %+v, want the one record of the stored version", recs)
	}
}

func testTemplatesConcurrentPut(t *testing.T, s store.Store) {
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
			err := s.PutTemplate(context.Background(), storedTemplate("p", "race", 1), setupAudit)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				stored++
			case errors.Is(err, store.ErrConflict):
				conflict++
			default:
				t.Errorf("PutTemplate: %v", err)
			}
		}()
	}
	wg.Wait()
	if stored != 1 || conflict != writers-1 {
		t.Errorf("%d writers of version 1: %d stored, %d conflicts; want exactly one stored", writers, stored, conflict)
	}
}

func testTemplatesInvalid(t *testing.T, s store.Store) {
	ctx := context.Background()
	for name, edit := range map[string]func(*store.Template){
		"no project": func(tm *store.Template) { tm.Project = "" },
		"no name":    func(tm *store.Template) { tm.Name = "" },
		"no body":    func(tm *store.Template) { tm.Body = nil },
		"no hash":    func(tm *store.Template) { tm.Hash = "" },
	} {
		tm := storedTemplate("p", "t", 1)
		edit(&tm)
		if err := s.PutTemplate(ctx, tm, setupAudit); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: PutTemplate = %v, want ErrInvalid", name, err)
		}
	}
	if list, err := s.ListTemplates(ctx, ""); err != nil || len(list) != 0 {
		t.Errorf("after refused puts: ListTemplates = %+v, %v; want none", list, err)
	}
	// Bodies are stored byte for byte.
	tm := storedTemplate("p", "bytes", 1)
	tm.Body = []byte("name: x\r\n\x00\xff tail\n")
	putTemplate(t, s, tm)
	if got := getTemplate(t, s, "p", "bytes", 0); !bytes.Equal(got.Body, tm.Body) {
		t.Errorf("Body = %q, want %q", got.Body, tm.Body)
	}
}
