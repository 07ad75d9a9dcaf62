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

// secretTests are the subtests of the Secrets contract; Exercise runs them
// with the others.
var secretTests = map[string]func(t *testing.T, s store.Store){
	"SecretsRoundTrip":       testSecretsRoundTrip,
	"SecretsVersions":        testSecretsVersions,
	"SecretsScopes":          testSecretsScopes,
	"SecretsList":            testSecretsList,
	"SecretsDelete":          testSecretsDelete,
	"SecretsRekey":           testSecretsRekey,
	"SecretsRekeyAllOrNone":  testSecretsRekeyAllOrNone,
	"SecretsConcurrentPut":   testSecretsConcurrentPut,
	"SecretsInvalidRejected": testSecretsInvalid,
}

// sealedSecret returns a secret whose "sealed" bytes name it, so a mix-up
// between rows shows in the diff.
func sealedSecret(project, name string, version int) store.Secret {
	return store.Secret{
		Project: project, Name: name, Version: version, KeyID: "k-0001",
		Nonce:      []byte(fmt.Sprintf("nonce-%s-%s-%d", project, name, version)),
		Ciphertext: []byte(fmt.Sprintf("ct-%s-%s-%d\x00\xff", project, name, version)),
		CreatedBy:  "user:alice", CreatedAt: at(version),
	}
}

func putSecret(t *testing.T, s store.Store, sec store.Secret) {
	t.Helper()
	if err := s.PutSecret(context.Background(), sec, setupAudit); err != nil {
		t.Fatalf("PutSecret(%q/%q v%d): %v", sec.Project, sec.Name, sec.Version, err)
	}
}

func latestSecret(t *testing.T, s store.Store, project, name string) store.Secret {
	t.Helper()
	got, err := s.LatestSecret(context.Background(), project, name)
	if err != nil {
		t.Fatalf("LatestSecret(%q, %q): %v", project, name, err)
	}
	return got
}

func testSecretsRoundTrip(t *testing.T, s store.Store) {
	want := sealedSecret("vision", "WANDB_API_KEY", 1)
	putSecret(t, s, want)
	if d := diff(want, latestSecret(t, s, "vision", "WANDB_API_KEY")); d != "" {
		t.Errorf("LatestSecret differs from what was put:%s", d)
	}
	_, err := s.LatestSecret(context.Background(), "vision", "OTHER")
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LatestSecret of a missing secret: err = %v, want ErrNotFound", err)
	}
}

func testSecretsVersions(t *testing.T, s store.Store) {
	ctx := context.Background()
	putSecret(t, s, sealedSecret("", "TOKEN", 1))
	for _, v := range []int{1, 3, 0} {
		if err := s.PutSecret(ctx, sealedSecret("", "TOKEN", v), setupAudit); !errors.Is(err, store.ErrConflict) {
			t.Errorf("PutSecret version %d after version 1: err = %v, want ErrConflict", v, err)
		}
	}
	if err := s.PutSecret(ctx, sealedSecret("", "NEW", 2), setupAudit); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutSecret version 2 of a new secret: err = %v, want ErrConflict", err)
	}
	v2 := sealedSecret("", "TOKEN", 2)
	putSecret(t, s, v2)
	if d := diff(v2, latestSecret(t, s, "", "TOKEN")); d != "" {
		t.Errorf("LatestSecret after a second version:%s", d)
	}
}

func testSecretsScopes(t *testing.T, s store.Store) {
	global := sealedSecret("", "HF_TOKEN", 1)
	vision := sealedSecret("vision", "HF_TOKEN", 1)
	putSecret(t, s, global)
	putSecret(t, s, vision)
	if d := diff(global, latestSecret(t, s, "", "HF_TOKEN")); d != "" {
		t.Errorf("global secret:%s", d)
	}
	if d := diff(vision, latestSecret(t, s, "vision", "HF_TOKEN")); d != "" {
		t.Errorf("project secret:%s", d)
	}
	// No fallback inside the store.
	if _, err := s.LatestSecret(context.Background(), "nlp", "HF_TOKEN"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LatestSecret of another project: err = %v, want ErrNotFound", err)
	}
}

func testSecretsList(t *testing.T, s store.Store) {
	putSecret(t, s, sealedSecret("vision", "B", 1))
	putSecret(t, s, sealedSecret("", "Z", 1))
	putSecret(t, s, sealedSecret("vision", "A", 1))
	putSecret(t, s, sealedSecret("vision", "A", 2))
	putSecret(t, s, sealedSecret("audio", "A", 1))
	got, err := s.ListSecrets(context.Background())
	if err != nil {
		t.Fatalf("ListSecrets: %v", err)
	}
	var keys []string
	for _, sec := range got {
		keys = append(keys, fmt.Sprintf("%s/%s@%d", sec.Project, sec.Name, sec.Version))
		if sec.Nonce != nil || sec.Ciphertext != nil {
			t.Errorf("ListSecrets returned the sealed value of %s/%s", sec.Project, sec.Name)
		}
		if sec.KeyID != "k-0001" || sec.CreatedBy != "user:alice" || !sec.CreatedAt.Equal(at(sec.Version)) {
			t.Errorf("ListSecrets metadata of %s/%s: %+v", sec.Project, sec.Name, sec)
		}
	}
	want := []string{"/Z@1", "audio/A@1", "vision/A@2", "vision/B@1"}
	if d := diff(want, keys); d != "" {
		t.Errorf("ListSecrets order or versions:%s", d)
	}
}

func testSecretsDelete(t *testing.T, s store.Store) {
	ctx := context.Background()
	putSecret(t, s, sealedSecret("vision", "K", 1))
	putSecret(t, s, sealedSecret("vision", "K", 2))
	putSecret(t, s, sealedSecret("", "K", 1))
	if err := s.DeleteSecret(ctx, "vision", "K", setupAudit); err != nil {
		t.Fatalf("DeleteSecret: %v", err)
	}
	if _, err := s.LatestSecret(ctx, "vision", "K"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LatestSecret after delete: err = %v, want ErrNotFound", err)
	}
	latestSecret(t, s, "", "K") // the global one stays
	if err := s.DeleteSecret(ctx, "vision", "K", setupAudit); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteSecret twice: err = %v, want ErrNotFound", err)
	}
	// Every version went: setting it again starts at version 1.
	putSecret(t, s, sealedSecret("vision", "K", 1))
}

func testSecretsRekey(t *testing.T, s store.Store) {
	ctx := context.Background()
	putSecret(t, s, sealedSecret("", "A", 1))
	putSecret(t, s, sealedSecret("", "A", 2))
	putSecret(t, s, sealedSecret("vision", "B", 1))
	var seen []string
	n, err := s.RekeySecrets(ctx, func(sec store.Secret) (store.Secret, error) {
		seen = append(seen, fmt.Sprintf("%s/%s@%d", sec.Project, sec.Name, sec.Version))
		if want := sealedSecret(sec.Project, sec.Name, sec.Version); !bytes.Equal(sec.Ciphertext, want.Ciphertext) {
			t.Errorf("reseal got ciphertext %q for %s/%s, want %q", sec.Ciphertext, sec.Project, sec.Name, want.Ciphertext)
		}
		sec.KeyID = "k-0002"
		sec.Nonce = append([]byte("new-"), sec.Nonce...)
		sec.Ciphertext = append([]byte("new-"), sec.Ciphertext...)
		return sec, nil
	}, setupAudit)
	if err != nil || n != 3 {
		t.Fatalf("RekeySecrets = %d, %v; want 3, nil", n, err)
	}
	if d := diff([]string{"/A@1", "/A@2", "vision/B@1"}, seen); d != "" {
		t.Errorf("versions passed to reseal:%s", d)
	}
	got := latestSecret(t, s, "", "A")
	want := sealedSecret("", "A", 2)
	want.KeyID, want.Nonce, want.Ciphertext = "k-0002", append([]byte("new-"), want.Nonce...), append([]byte("new-"), want.Ciphertext...)
	if d := diff(want, got); d != "" {
		t.Errorf("secret after rekey:%s", d)
	}
}

func testSecretsRekeyAllOrNone(t *testing.T, s store.Store) {
	ctx := context.Background()
	putSecret(t, s, sealedSecret("", "A", 1))
	putSecret(t, s, sealedSecret("", "B", 1))
	boom := errors.New("cannot open B")
	_, err := s.RekeySecrets(ctx, func(sec store.Secret) (store.Secret, error) {
		if sec.Name == "B" {
			return store.Secret{}, boom
		}
		sec.KeyID = "k-0002"
		return sec, nil
	}, setupAudit)
	if !errors.Is(err, boom) {
		t.Fatalf("RekeySecrets with a failing reseal: err = %v, want %v", err, boom)
	}
	if got := latestSecret(t, s, "", "A"); got.KeyID != "k-0001" {
		t.Errorf("secret A was rekeyed to %s although the rekey failed", got.KeyID)
	}
	// The failed rekey left the store usable: a later one sees both.
	if n, err := s.RekeySecrets(ctx, func(sec store.Secret) (store.Secret, error) { return sec, nil }, setupAudit); err != nil || n != 2 {
		t.Errorf("RekeySecrets identity = %d, %v; want 2, nil", n, err)
	}
}

func testSecretsConcurrentPut(t *testing.T, s store.Store) {
	// Many writers race for version 1: exactly one wins.
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.PutSecret(context.Background(), sealedSecret("", "RACE", 1), setupAudit)
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("PutSecret: %v, want nil or ErrConflict", err)
		}
	}
	if ok != 1 {
		t.Errorf("%d concurrent PutSecret of version 1 succeeded, want 1", ok)
	}
}

func testSecretsInvalid(t *testing.T, s store.Store) {
	for name, sec := range map[string]store.Secret{
		"no name":       {Version: 1, KeyID: "k", Nonce: []byte("n"), Ciphertext: []byte("c")},
		"no key id":     {Name: "A", Version: 1, Nonce: []byte("n"), Ciphertext: []byte("c")},
		"no ciphertext": {Name: "A", Version: 1, KeyID: "k", Nonce: []byte("n")},
	} {
		if err := s.PutSecret(context.Background(), sec, setupAudit); err == nil {
			t.Errorf("PutSecret(%s) stored it; want an error", name)
		}
	}
}
