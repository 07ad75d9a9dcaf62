package service_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite"
)

// List narrows to a user's jobs, a pool's and those whose name holds some
// text, and refuses filters that could match nothing with an error that
// names the field and the fix.
func TestListFilters(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc := service.New(service.Config{Store: st, ArtifactsRoot: filepath.Join(dir, "artifacts")})
	for _, pool := range []string{"default", "gpu"} {
		if _, _, err := svc.Pools.PutPool(ctx, admin, domain.Pool{Name: pool, Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}}}); err != nil {
			t.Fatal(err)
		}
	}
	bob := service.Principal{Subject: "bob", Role: "admin"}
	ids := map[string]int64{}
	for _, sub := range []struct {
		p          service.Principal
		name, pool string
	}{{admin, "train-resnet", "default"}, {bob, "eval-resnet", "gpu"}, {admin, "sweep", "gpu"}} {
		doc := "name: " + sub.name + "\npool: " + sub.pool + "\nentrypoint: [python3, train.py]\n"
		res, err := svc.Jobs.Submission(ctx, sub.p, service.SubmitInput{Doc: []byte(doc)})
		if err != nil {
			t.Fatalf("submit %s: %v", sub.name, err)
		}
		ids[sub.name] = res.Job.ID
	}
	for _, tc := range []struct {
		o    service.ListOptions
		want []string
	}{
		{service.ListOptions{User: "bob"}, []string{"eval-resnet"}},
		{service.ListOptions{Pool: "gpu"}, []string{"sweep", "eval-resnet"}},
		{service.ListOptions{Name: "ResNet"}, []string{"eval-resnet", "train-resnet"}},
		{service.ListOptions{User: "admin", Pool: "gpu", Name: "SWEEP"}, []string{"sweep"}},
		{service.ListOptions{Name: "resnet", Limit: 1}, []string{"eval-resnet"}},
		{service.ListOptions{Name: "resnet", BeforeID: ids["eval-resnet"]}, []string{"train-resnet"}},
		{service.ListOptions{Name: strings.Repeat("é", 200)}, nil},
	} {
		jobs, _, err := svc.Jobs.List(ctx, admin, tc.o)
		if err != nil {
			t.Errorf("List(%+v): %v", tc.o, err)
			continue
		}
		var got []string
		for _, j := range jobs {
			got = append(got, j.Name)
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("List(%+v) = %q, want %q", tc.o, got, tc.want)
		}
	}

	for _, tc := range []struct {
		o          service.ListOptions
		path, text string
	}{
		{service.ListOptions{Name: strings.Repeat("a", 201)}, "name", "use at most 200"},
		{service.ListOptions{Name: strings.Repeat("é", 201)}, "name", "is 201 characters long"},
		{service.ListOptions{Name: "a\nb"}, "name", "line break"},
		{service.ListOptions{Name: "\xff"}, "name", "UTF-8"},
		{service.ListOptions{User: "al\x1bice"}, "user", "control character"},
		{service.ListOptions{User: strings.Repeat("u", 201)}, "user", "use at most 200"},
		{service.ListOptions{Pool: "GPU"}, "pool", "lowercase letters"},
		{service.ListOptions{Pool: "gpu pool"}, "pool", "trainyard pool ls"},
	} {
		_, _, err := svc.Jobs.List(ctx, admin, tc.o)
		var fe domain.FieldErrors
		if !errors.As(err, &fe) || len(fe) != 1 || fe[0].Path != tc.path || !strings.Contains(fe[0].Message, tc.text) {
			t.Errorf("List(%+v) = %v; want one field error at %s saying %q", tc.o, err, tc.path, tc.text)
		}
	}
}
