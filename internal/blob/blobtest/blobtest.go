// Package blobtest is the conformance suite that every blob.Store backend
// runs: a backend's test supplies a constructor and calls Exercise.
package blobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"trainyard/internal/blob"
)

// Fixture is one fresh, empty store under test.
type Fixture struct {
	// Store is the store under test; it must start empty.
	Store blob.Store
	// Corrupt changes the stored bytes of key behind the store's back (same
	// length or not), leaving any recorded SHA-256 as it was.
	Corrupt func(t *testing.T, key string)
}

// LargeSize is the size of the large object round trip: above the 16 MiB
// part size, so S3 backends upload it in parts.
const LargeSize = 20 << 20

// Exercise runs the conformance suite. newStore is called once per subtest
// and must return an empty store, isolated from the others.
func Exercise(t *testing.T, newStore func(t *testing.T) Fixture) {
	ctx := context.Background()

	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		for _, tc := range []struct {
			name string
			size int
			// declared is the size passed to Put: the real size or -1.
			unknown bool
		}{
			{"empty", 0, false},
			{"empty-unknown-size", 0, true},
			{"small", 5, false},
			{"small-unknown-size", 1000, true},
			{"large", LargeSize, false},
			{"large-unknown-size", LargeSize, true},
		} {
			data := randomBytes(tc.size)
			key := "roundtrip/" + tc.name
			size := int64(len(data))
			if tc.unknown {
				size = -1
			}
			// A plain io.Reader (not a *bytes.Reader) exercises the
			// non-seekable path.
			info, err := s.Put(ctx, key, struct{ io.Reader }{bytes.NewReader(data)}, size)
			if err != nil {
				t.Fatalf("%s: Put: %v", tc.name, err)
			}
			want := sum(data)
			if info.Key != key || info.Size != int64(len(data)) || info.SHA256 != want {
				t.Errorf("%s: Put returned %+v; want key %q size %d sha256 %s", tc.name, info, key, len(data), want)
			}
			got, ginfo := get(t, s, key)
			if !bytes.Equal(got, data) {
				t.Errorf("%s: Get returned %d bytes differing from the %d put", tc.name, len(got), len(data))
			}
			if ginfo.Size != int64(len(data)) || (ginfo.SHA256 != "" && ginfo.SHA256 != want) {
				t.Errorf("%s: Get info %+v; want size %d sha256 %s", tc.name, ginfo, len(data), want)
			}
			if _, err := blob.Verify(ctx, s, key, want); err != nil {
				t.Errorf("%s: Verify of an intact object: %v", tc.name, err)
			}
		}
	})

	t.Run("SizeMismatch", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		for _, declared := range []int64{3, 5} {
			_, err := s.Put(ctx, "mismatch", strings.NewReader("four"), declared)
			if !errors.Is(err, blob.ErrSizeMismatch) {
				t.Errorf("Put of 4 bytes declared as %d: err = %v; want ErrSizeMismatch", declared, err)
			}
		}
		if _, err := s.Stat(ctx, "mismatch"); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("Stat after failed Puts: err = %v; want ErrNotFound (nothing stored)", err)
		}
		if _, err := s.Put(ctx, "mismatch", strings.NewReader("x"), -2); err == nil {
			t.Errorf("Put with size -2 succeeded; want an error")
		}
	})

	t.Run("PutFile", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		data := randomBytes(100_000)
		path := t.TempDir() + "/file.bin"
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		info, err := blob.PutFile(ctx, s, "files/file.bin", path)
		if err != nil {
			t.Fatalf("PutFile: %v", err)
		}
		if info.SHA256 != sum(data) || info.Size != int64(len(data)) {
			t.Errorf("PutFile returned %+v; want size %d sha256 %s", info, len(data), sum(data))
		}
		if got, _ := get(t, s, "files/file.bin"); !bytes.Equal(got, data) {
			t.Errorf("Get after PutFile returned different bytes")
		}
	})

	t.Run("Range", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		data := randomBytes(1000)
		if _, err := s.Put(ctx, "r/obj", bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name           string
			offset, length int64
			want           []byte
		}{
			{"start", 0, 10, data[:10]},
			{"first-byte", 0, 1, data[:1]},
			{"last-byte", 999, 1, data[999:]},
			{"middle", 400, 100, data[400:500]},
			{"end", 990, 10, data[990:]},
			{"to-end", 900, -1, data[900:]},
			{"whole", 0, -1, data},
			{"past-end-short-read", 995, 100, data[995:]},
			{"zero-length", 10, 0, nil},
			{"at-end-empty", 1000, -1, nil},
			{"at-end-with-length", 1000, 5, nil},
		} {
			rc, info, err := s.GetRange(ctx, "r/obj", tc.offset, tc.length)
			if err != nil {
				t.Errorf("%s: GetRange(%d, %d): %v", tc.name, tc.offset, tc.length, err)
				continue
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Errorf("%s: read: %v", tc.name, err)
			}
			if !bytes.Equal(got, tc.want) {
				t.Errorf("%s: GetRange(%d, %d) returned %d bytes; want %d (content equal: %v)", tc.name, tc.offset, tc.length, len(got), len(tc.want), bytes.Equal(got, tc.want))
			}
			if info.Size != int64(len(data)) {
				t.Errorf("%s: info.Size = %d; want the whole object's %d", tc.name, info.Size, len(data))
			}
		}
		for _, tc := range []struct{ offset, length int64 }{{1001, 1}, {5000, -1}, {-1, 5}, {0, -2}} {
			rc, _, err := s.GetRange(ctx, "r/obj", tc.offset, tc.length)
			if !errors.Is(err, blob.ErrInvalidRange) {
				if rc != nil {
					rc.Close()
				}
				t.Errorf("GetRange(%d, %d): err = %v; want ErrInvalidRange", tc.offset, tc.length, err)
			}
		}
		if _, _, err := s.GetRange(ctx, "r/missing", 0, 1); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("GetRange of a missing key: err = %v; want ErrNotFound", err)
		}
		// Empty object: offset 0 is the end.
		if _, err := s.Put(ctx, "r/empty", bytes.NewReader(nil), 0); err != nil {
			t.Fatal(err)
		}
		rc, _, err := s.GetRange(ctx, "r/empty", 0, 10)
		if err != nil {
			t.Fatalf("GetRange(0, 10) of an empty object: %v", err)
		}
		if got, _ := io.ReadAll(rc); len(got) != 0 {
			t.Errorf("GetRange of an empty object returned %d bytes", len(got))
		}
		rc.Close()
	})

	t.Run("StatOverwriteDelete", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		if _, err := s.Stat(ctx, "o/k"); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("Stat of a missing key: err = %v; want ErrNotFound", err)
		}
		if _, _, err := s.Get(ctx, "o/k"); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("Get of a missing key: err = %v; want ErrNotFound", err)
		}
		if _, err := s.Put(ctx, "o/k", strings.NewReader("first version"), -1); err != nil {
			t.Fatal(err)
		}
		second := []byte("second")
		if _, err := s.Put(ctx, "o/k", bytes.NewReader(second), int64(len(second))); err != nil {
			t.Fatal(err)
		}
		info, err := s.Stat(ctx, "o/k")
		if err != nil {
			t.Fatalf("Stat: %v", err)
		}
		if info.Key != "o/k" || info.Size != int64(len(second)) || (info.SHA256 != "" && info.SHA256 != sum(second)) || info.ModTime.IsZero() {
			t.Errorf("Stat after overwrite = %+v; want size %d, sha256 %s, a ModTime", info, len(second), sum(second))
		}
		if got, _ := get(t, s, "o/k"); string(got) != "second" {
			t.Errorf("Get after overwrite = %q; want %q", got, "second")
		}
		for i := range 2 {
			if err := s.Delete(ctx, "o/k"); err != nil {
				t.Errorf("Delete #%d: %v (Delete must be idempotent)", i+1, err)
			}
		}
		if _, err := s.Stat(ctx, "o/k"); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("Stat after Delete: err = %v; want ErrNotFound", err)
		}
		if _, _, err := s.Get(ctx, "o/k"); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("Get after Delete: err = %v; want ErrNotFound", err)
		}
		if err := s.Delete(ctx, "never/existed"); err != nil {
			t.Errorf("Delete of a key never written: %v", err)
		}
		if keys := listKeys(t, s, ""); len(keys) != 0 {
			t.Errorf("List after deleting everything = %q; want none", keys)
		}
	})

	t.Run("List", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		keys := []string{
			"a.txt", "a/b", "a/bc", "a/b-c/d", "a0", "ab/c", "b",
			"ckpt/step-1/model", "ckpt/step-10/model", "ckpt/step-2/model",
			"z/y/x/w", "Z", "é/1",
		}
		for i, k := range slices.Clone(keys) {
			data := randomBytes(i)
			if _, err := s.Put(ctx, k, bytes.NewReader(data), int64(len(data))); err != nil {
				t.Fatalf("Put %q: %v", k, err)
			}
		}
		sorted := slices.Sorted(slices.Values(keys))
		for _, tc := range []struct {
			prefix string
			want   []string
		}{
			{"", sorted},
			{"a", []string{"a.txt", "a/b", "a/b-c/d", "a/bc", "a0", "ab/c"}},
			{"a/", []string{"a/b", "a/b-c/d", "a/bc"}},
			{"a/b", []string{"a/b", "a/b-c/d", "a/bc"}},
			{"a/b-", []string{"a/b-c/d"}},
			{"ckpt/step-1", []string{"ckpt/step-1/model", "ckpt/step-10/model"}},
			{"ckpt/step-1/", []string{"ckpt/step-1/model"}},
			{"z/y/", []string{"z/y/x/w"}},
			{"nothing", nil},
			{"nothing/here/", nil},
			{"b/", nil},
		} {
			got := listKeys(t, s, tc.prefix)
			if !slices.Equal(got, tc.want) {
				t.Errorf("List(%q) = %q; want %q", tc.prefix, got, tc.want)
			}
		}
		for info, err := range s.List(ctx, "a/bc") {
			if err != nil {
				t.Fatal(err)
			}
			if info.Key != "a/bc" || info.Size != int64(slices.Index(keys, "a/bc")) || info.ModTime.IsZero() {
				t.Errorf("List info = %+v; want key a/bc, size %d, a ModTime", info, slices.Index(keys, "a/bc"))
			}
		}
		for _, p := range []string{"/a", "../", "a/../", "a//", "x\\y/"} {
			var err error
			for _, err = range s.List(ctx, p) {
				if err != nil {
					break
				}
			}
			if !errors.Is(err, blob.ErrInvalidKey) {
				t.Errorf("List(%q): err = %v; want ErrInvalidKey", p, err)
			}
		}
		// Stopping early must not panic or leak.
		n := 0
		for _, err := range s.List(ctx, "") {
			if err != nil {
				t.Fatal(err)
			}
			n++
			if n == 2 {
				break
			}
		}
	})

	t.Run("KeyValidation", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		bad := []string{
			"", "/abs", "a/../b", "..", "../x", "a/./b", "a//b", "dir/", "a\\b", "a\x00b", "a\nb",
			strings.Repeat("k/", blob.MaxKeyLen/2) + "k", strings.Repeat("s", blob.MaxSegmentLen+1), "\xff", blob.ReservedPrefix + "x", "a/" + blob.ReservedPrefix + "1",
		}
		for _, k := range bad {
			checks := map[string]error{}
			_, checks["Put"] = s.Put(ctx, k, strings.NewReader("x"), 1)
			_, _, checks["Get"] = s.Get(ctx, k)
			_, _, checks["GetRange"] = s.GetRange(ctx, k, 0, 1)
			_, checks["Stat"] = s.Stat(ctx, k)
			checks["Delete"] = s.Delete(ctx, k)
			for op, err := range checks {
				var ke *blob.KeyError
				if !errors.Is(err, blob.ErrInvalidKey) || !errors.As(err, &ke) {
					t.Errorf("%s(%q): err = %v; want a *KeyError matching ErrInvalidKey", op, k, err)
				}
			}
		}
		if keys := listKeys(t, s, ""); len(keys) != 0 {
			t.Errorf("invalid keys left objects behind: %q", keys)
		}
		for _, k := range []string{"a", "a.b/c-d_e/f~g", "with space/x", "ünï/κ", strings.Repeat("s", blob.MaxSegmentLen), strings.Repeat("k/", blob.MaxKeyLen/2-1) + "kk"} {
			if _, err := s.Put(ctx, k, strings.NewReader("x"), 1); err != nil {
				t.Errorf("Put(%q) of a valid key: %v", k, err)
			}
		}
	})

	t.Run("ConcurrentPuts", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		const n = 16
		var wg sync.WaitGroup
		errs := make([]error, n)
		datas := make([][]byte, n)
		for i := range n {
			datas[i] = randomBytes(10_000 + i)
			wg.Go(func() {
				key := fmt.Sprintf("conc/%02d/obj", i)
				_, errs[i] = s.Put(ctx, key, bytes.NewReader(datas[i]), -1)
				if errs[i] == nil && i%2 == 0 {
					// Deletes racing with Puts in sibling directories.
					errs[i] = s.Delete(ctx, key)
				}
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("writer %d: %v", i, err)
			}
		}
		var want []string
		for i := 1; i < n; i += 2 {
			key := fmt.Sprintf("conc/%02d/obj", i)
			want = append(want, key)
			if got, _ := get(t, s, key); !bytes.Equal(got, datas[i]) {
				t.Errorf("%s holds other bytes than written", key)
			}
		}
		if got := listKeys(t, s, "conc/"); !slices.Equal(got, want) {
			t.Errorf("List after concurrent writes = %q; want %q", got, want)
		}
	})

	t.Run("ConcurrentOverwriteIsAtomic", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		a, b := bytes.Repeat([]byte("a"), 256<<10), bytes.Repeat([]byte("b"), 256<<10)
		if _, err := s.Put(ctx, "atomic", bytes.NewReader(a), int64(len(a))); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := range 6 {
				d := a
				if i%2 == 0 {
					d = b
				}
				if _, err := s.Put(ctx, "atomic", bytes.NewReader(d), int64(len(d))); err != nil {
					t.Errorf("Put: %v", err)
				}
			}
		})
		defer wg.Wait()
		for range 20 {
			rc, _, err := s.Get(ctx, "atomic")
			if err != nil {
				t.Errorf("Get during overwrites: %v", err)
				break
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Errorf("reading during overwrites: %v", err)
				break
			}
			if !bytes.Equal(got, a) && !bytes.Equal(got, b) {
				t.Errorf("a reader saw a mix or a part of two versions (%d bytes)", len(got))
				break
			}
		}
	})

	t.Run("Corrupt", func(t *testing.T) {
		t.Parallel()
		f := newStore(t)
		s := f.Store
		data := randomBytes(4096)
		info, err := s.Put(ctx, "c/obj", bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		f.Corrupt(t, "c/obj")
		_, err = blob.Verify(ctx, s, "c/obj", info.SHA256)
		var ce *blob.CorruptError
		if !errors.Is(err, blob.ErrCorrupt) || !errors.As(err, &ce) {
			t.Fatalf("Verify of a corrupted object: err = %v; want a *CorruptError", err)
		}
		wantMsg := fmt.Sprintf("blob c/obj is corrupt: sha256 %s, expected %s", ce.Got, info.SHA256)
		if err.Error() != wantMsg || ce.Got == info.SHA256 {
			t.Errorf("error = %q; want %q with a different actual hash", err, wantMsg)
		}
		if _, err := blob.Verify(ctx, s, "c/missing", info.SHA256); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("Verify of a missing key: err = %v; want ErrNotFound", err)
		}
	})

	t.Run("CanceledContext", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.Put(cctx, "canceled", strings.NewReader("data"), 4); err == nil {
			t.Errorf("Put with a canceled context succeeded")
		}
		if _, err := s.Stat(ctx, "canceled"); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("Stat after a canceled Put: err = %v; want ErrNotFound", err)
		}
	})
}

func get(t *testing.T, s blob.Store, key string) ([]byte, blob.Info) {
	t.Helper()
	rc, info, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get(%q): read: %v", key, err)
	}
	return b, info
}

func listKeys(t *testing.T, s blob.Store, prefix string) []string {
	t.Helper()
	var keys []string
	for info, err := range s.List(context.Background(), prefix) {
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		keys = append(keys, info.Key)
	}
	return keys
}

func randomBytes(n int) []byte {
	r := rand.NewChaCha8([32]byte{byte(n), byte(n >> 8), byte(n >> 16)})
	b := make([]byte, n)
	r.Read(b)
	return b
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// BenchmarkPutGet measures Put and Get throughput of one object of size
// bytes on s (b.SetBytes makes go test report MB/s). Put reads from a
// *bytes.Reader, which backends may hash and upload in two passes.
func BenchmarkPutGet(b *testing.B, s blob.Store, size int) {
	ctx := context.Background()
	data := randomBytes(size)
	key := fmt.Sprintf("bench/%d", size)
	b.Run("Put", func(b *testing.B) {
		b.SetBytes(int64(size))
		for b.Loop() {
			if _, err := s.Put(ctx, key, bytes.NewReader(data), int64(size)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Get", func(b *testing.B) {
		b.SetBytes(int64(size))
		for b.Loop() {
			rc, _, err := s.Get(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, rc)
			rc.Close()
			if err != nil || n != int64(size) {
				b.Fatalf("Get read %d bytes, err %v; want %d", n, err, size)
			}
		}
	})
	if err := s.Delete(ctx, key); err != nil {
		b.Fatal(err)
	}
}
