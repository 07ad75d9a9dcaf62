package secrets

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func newTestKey(t *testing.T, fill byte) *Key {
	t.Helper()
	k, err := NewKey(bytes.Repeat([]byte{fill}, KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSealOpenRoundTrip(t *testing.T) {
	k := newTestKey(t, 1)
	scope := Scope{Project: "vision", Name: "WANDB_API_KEY", Version: 3}
	for name, value := range map[string][]byte{
		"text":   []byte("s3cr3t-value"),
		"empty":  {},
		"binary": {0, 1, 2, 0xff, '\n'},
		"large":  bytes.Repeat([]byte("x"), 1<<16),
	} {
		t.Run(name, func(t *testing.T) {
			s, err := k.Seal(scope, value)
			if err != nil {
				t.Fatal(err)
			}
			if s.KeyID != k.ID() {
				t.Errorf("KeyID = %q, want %q", s.KeyID, k.ID())
			}
			if len(value) >= 4 && bytes.Contains(s.Ciphertext, value) {
				t.Errorf("the ciphertext contains the plaintext")
			}
			got, err := k.Open(scope, s)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, value) {
				t.Errorf("Open = %q, want %q", got, value)
			}
		})
	}
}

func TestSealUsesFreshNonce(t *testing.T) {
	k := newTestKey(t, 1)
	scope := Scope{Name: "A", Version: 1}
	a, _ := k.Seal(scope, []byte("same"))
	b, _ := k.Seal(scope, []byte("same"))
	if bytes.Equal(a.Nonce, b.Nonce) || bytes.Equal(a.Ciphertext, b.Ciphertext) {
		t.Errorf("two seals of one value share a nonce or ciphertext")
	}
}

func TestOpenTamperedFails(t *testing.T) {
	k := newTestKey(t, 1)
	scope := Scope{Project: "vision", Name: "TOKEN", Version: 2}
	tests := map[string]struct {
		scope  Scope
		mutate func(s *Sealed)
	}{
		"flipped ciphertext bit": {scope, func(s *Sealed) { s.Ciphertext[0] ^= 1 }},
		"flipped tag bit":        {scope, func(s *Sealed) { s.Ciphertext[len(s.Ciphertext)-1] ^= 0x80 }},
		"flipped nonce bit":      {scope, func(s *Sealed) { s.Nonce[3] ^= 1 }},
		"truncated":              {scope, func(s *Sealed) { s.Ciphertext = s.Ciphertext[:len(s.Ciphertext)-1] }},
		"short nonce":            {scope, func(s *Sealed) { s.Nonce = s.Nonce[:4] }},
		"other name":             {Scope{Project: "vision", Name: "TOKEN2", Version: 2}, func(*Sealed) {}},
		"other project":          {Scope{Project: "audio", Name: "TOKEN", Version: 2}, func(*Sealed) {}},
		"global scope":           {Scope{Name: "TOKEN", Version: 2}, func(*Sealed) {}},
		"other version":          {Scope{Project: "vision", Name: "TOKEN", Version: 1}, func(*Sealed) {}},
		// Length-prefixed parts: moving a character between parts changes the data.
		"shifted boundary": {Scope{Project: "visio", Name: "nTOKEN", Version: 2}, func(*Sealed) {}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := k.Seal(scope, []byte("value-123"))
			if err != nil {
				t.Fatal(err)
			}
			tc.mutate(&s)
			got, err := k.Open(tc.scope, s)
			if !errors.Is(err, ErrTampered) {
				t.Fatalf("Open = %q, %v; want ErrTampered", got, err)
			}
			if strings.Contains(err.Error(), "value-123") {
				t.Errorf("the error shows the value: %v", err)
			}
		})
	}
}

func TestOpenWrongKeyNamesKeyIDs(t *testing.T) {
	k1, k2 := newTestKey(t, 1), newTestKey(t, 2)
	if k1.ID() == k2.ID() {
		t.Fatalf("two keys share id %s", k1.ID())
	}
	scope := Scope{Name: "A", Version: 1}
	s, err := k1.Seal(scope, []byte("value"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = k2.Open(scope, s)
	if !errors.Is(err, ErrWrongKey) {
		t.Fatalf("Open with another key: err = %v, want ErrWrongKey", err)
	}
	for _, id := range []string{k1.ID(), k2.ID()} {
		if !strings.Contains(err.Error(), id) {
			t.Errorf("error %q does not name key id %s", err, id)
		}
	}
	// A forged key id does not get past authentication either.
	s.KeyID = k2.ID()
	if _, err := k2.Open(scope, s); !errors.Is(err, ErrTampered) {
		t.Errorf("Open with a forged key id: err = %v, want ErrTampered", err)
	}
}

func TestKeyIDStable(t *testing.T) {
	a, b := newTestKey(t, 7), newTestKey(t, 7)
	if a.ID() != b.ID() || !strings.HasPrefix(a.ID(), "k-") || len(a.ID()) != 18 {
		t.Errorf("key ids %q and %q: want equal, k- and 16 hex digits", a.ID(), b.ID())
	}
}

func TestRotateRoundTrip(t *testing.T) {
	old, nw := newTestKey(t, 1), newTestKey(t, 2)
	ring := NewKeyring(old)
	scopes := []Scope{{Name: "A", Version: 1}, {Name: "A", Version: 2}, {Project: "p", Name: "B", Version: 1}}
	sealed := make([]Sealed, len(scopes))
	for i, sc := range scopes {
		var err error
		if sealed[i], err = ring.Current().Seal(sc, []byte("value-"+sc.String())); err != nil {
			t.Fatal(err)
		}
	}
	// A failing rotation keeps the current key.
	boom := errors.New("boom")
	if err := ring.Rotate(nw, func(*Key) error { return boom }); !errors.Is(err, boom) || ring.Current() != old {
		t.Fatalf("failed Rotate = %v, current %s; want boom and the old key", err, ring.Current().ID())
	}
	err := ring.Rotate(nw, func(cur *Key) error {
		for i, sc := range scopes {
			var err error
			if sealed[i], err = Reseal(cur, nw, sc, sealed[i]); err != nil {
				return err
			}
			if sealed[i].KeyID != nw.ID() {
				t.Errorf("resealed %s has key id %s, want %s", sc, sealed[i].KeyID, nw.ID())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	if _, err := old.Open(scopes[0], sealed[0]); !errors.Is(err, ErrWrongKey) {
		t.Errorf("the old key opened a resealed value: err = %v", err)
	}
	for i, sc := range scopes {
		var got []byte
		err := ring.With(func(k *Key) (err error) { got, err = k.Open(sc, sealed[i]); return err })
		if err != nil || string(got) != "value-"+sc.String() {
			t.Errorf("Open %s after rotation = %q, %v", sc, got, err)
		}
	}
	// Resealing with the wrong source key fails and names it.
	if _, err := Reseal(old, nw, scopes[0], sealed[0]); !errors.Is(err, ErrWrongKey) {
		t.Errorf("Reseal from the wrong key: err = %v, want ErrWrongKey", err)
	}
}

func TestLoadKeyFilePermissions(t *testing.T) {
	raw := bytes.Repeat([]byte{9}, KeySize)
	want := newTestKey(t, 9).ID()
	tests := map[string]struct {
		mode    os.FileMode
		content []byte
		wantErr error // nil: loads
	}{
		"0600 raw":            {0o600, raw, nil},
		"0400 raw":            {0o400, raw, nil},
		"0600 base64":         {0o600, []byte(base64.StdEncoding.EncodeToString(raw) + "\n"), nil},
		"0640 group-readable": {0o640, raw, ErrKeyFileMode},
		"0604 world-readable": {0o604, raw, ErrKeyFileMode},
		"0620 group-writable": {0o620, raw, ErrKeyFileMode},
		"0644":                {0o644, raw, ErrKeyFileMode},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "master.key")
			if err := os.WriteFile(path, tc.content, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.mode); err != nil {
				t.Fatal(err)
			}
			k, err := LoadKeyFile(path)
			if tc.wantErr == nil {
				if err != nil || k.ID() != want {
					t.Fatalf("LoadKeyFile = %v, %v; want key %s", k, err, want)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("LoadKeyFile: err = %v, want %v", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), "chmod 600 "+path) {
				t.Errorf("error %q does not say how to fix it", err)
			}
		})
	}
}

func TestLoadKeyFileBadContent(t *testing.T) {
	for name, content := range map[string]string{
		"empty":     "",
		"too short": "abc",
		"16 bytes":  base64.StdEncoding.EncodeToString(make([]byte, 16)),
		"not b64":   strings.Repeat("!", 44),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "k")
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadKeyFile(path); err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("LoadKeyFile = %v; want an error naming the file", err)
			}
		})
	}
	if _, err := LoadKeyFile(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadKeyFile of a missing file: err = %v, want ErrNotExist", err)
	}
}

func TestLoadOrCreateKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "master.key")
	k1, created, err := LoadOrCreateKeyFile(path)
	if err != nil || !created {
		t.Fatalf("first LoadOrCreateKeyFile = %v, created %v", err, created)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 || st.Size() != KeySize {
		t.Errorf("created key file: mode %04o, %d bytes; want 0600, %d bytes", st.Mode().Perm(), st.Size(), KeySize)
	}
	k2, created, err := LoadOrCreateKeyFile(path)
	if err != nil || created || k2.ID() != k1.ID() {
		t.Errorf("second LoadOrCreateKeyFile = %v, %v, created %v; want the same key, not created", k2, err, created)
	}
}

func TestLoadKeyring(t *testing.T) {
	raw := bytes.Repeat([]byte{5}, KeySize)
	env := map[string]string{EnvMasterKey: base64.StdEncoding.EncodeToString(raw)}
	path := filepath.Join(t.TempDir(), "master.key")
	r, source, created, err := LoadKeyring(path, func(k string) string { return env[k] })
	if err != nil || created || !strings.Contains(source, EnvMasterKey) || r.Current().ID() != newTestKey(t, 5).ID() {
		t.Fatalf("LoadKeyring from env = %v, %q, %v, %v", r, source, created, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a key file was created although the environment held the key")
	}
	env[EnvMasterKey] = "not-a-key"
	if _, _, _, err := LoadKeyring(path, func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), EnvMasterKey) {
		t.Errorf("LoadKeyring with a bad env key: err = %v, want one naming %s", err, EnvMasterKey)
	}
	delete(env, EnvMasterKey)
	r, source, created, err = LoadKeyring(path, func(k string) string { return env[k] })
	if err != nil || !created || source != path || r.Current() == nil {
		t.Fatalf("LoadKeyring from a new file = %v, %q, %v, %v", r, source, created, err)
	}
}
