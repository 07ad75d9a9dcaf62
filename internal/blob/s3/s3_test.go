package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"trainyard/internal/blob"
	"trainyard/internal/blob/blobtest"
)

const envURL = "TRAINYARD_TEST_S3"

// testConfig reads the server to test against from TRAINYARD_TEST_S3. It
// skips the test when unset, except under CI=true, where it fails.
func testConfig(t testing.TB) Config {
	t.Helper()
	raw := os.Getenv(envURL)
	if raw == "" {
		msg := envURL + " is not set, so the S3 backend is not tested; start a local S3-compatible server with\n" +
			"\teval \"$(bash .ci/s3server.sh)\"\n" +
			"(it prints export " + envURL + "=http://ACCESS_KEY:SECRET_KEY@127.0.0.1:9310/BUCKET?create=true)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	cfg, err := ParseURL(raw)
	if err != nil {
		t.Fatalf("%s: %v", envURL, err)
	}
	return cfg
}

// newStore returns a store confined to a fresh prefix, emptied at cleanup.
func newStore(t testing.TB) *Store {
	t.Helper()
	cfg := testConfig(t)
	var b [6]byte
	rand.Read(b[:])
	cfg.Prefix += "blobtest-" + hex.EncodeToString(b[:]) + "/"
	cfg.CreateBucket = true
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for oi := range s.client.ListObjectsIter(ctx, cfg.Bucket, minio.ListObjectsOptions{Prefix: cfg.Prefix, Recursive: true}) {
			if oi.Err == nil {
				s.client.RemoveObject(ctx, cfg.Bucket, oi.Key, minio.RemoveObjectOptions{})
			}
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	testConfig(t) // skip or fail once, not per subtest
	blobtest.Exercise(t, func(t *testing.T) blobtest.Fixture {
		s := newStore(t)
		return blobtest.Fixture{Store: s, Corrupt: func(t *testing.T, key string) {
			ctx := context.Background()
			info, err := s.Stat(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			// Other bytes under the same recorded hash, as bit rot would leave.
			_, err = s.client.PutObject(ctx, s.cfg.Bucket, s.name(key), strings.NewReader("rotten"), 6,
				minio.PutObjectOptions{UserMetadata: map[string]string{shaMeta: info.SHA256}})
			if err != nil {
				t.Fatal(err)
			}
		}}
	})
}

func TestRecordsSHA256(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	data := []byte("hello")
	put, err := s.Put(ctx, "k", bytes.NewReader(data), 5)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Stat(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	const want = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
	if put.SHA256 != want || st.SHA256 != want {
		t.Errorf("Put sha256 %q, Stat sha256 %q; want %q", put.SHA256, st.SHA256, want)
	}
}

func TestParseURL(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    Config
		wantErr string
	}{
		"plain": {
			in:   "http://AK:SK@127.0.0.1:9000/bucket",
			want: Config{Endpoint: "127.0.0.1:9000", Bucket: "bucket", AccessKey: "AK", SecretKey: "SK"},
		},
		"all": {
			in:   "https://AK:S%2FK@s3.example:443/b/some/prefix?region=eu-west-1&create=true",
			want: Config{Endpoint: "s3.example:443", TLS: true, Bucket: "b", Prefix: "some/prefix/", Region: "eu-west-1", AccessKey: "AK", SecretKey: "S/K", CreateBucket: true},
		},
		"no credentials": {in: "http://127.0.0.1:9000/b", wantErr: "access key or secret key missing"},
		"no bucket":      {in: "http://AK:SK@127.0.0.1:9000/", wantErr: "no bucket"},
		"bad scheme":     {in: "s3://AK:SK@h/b", wantErr: "not http or https"},
		"malformed":      {in: "http://AK:SECRETVALUE@h:badport/b", wantErr: "malformed"},
	}
	for name, tc := range tests {
		got, err := ParseURL(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err = %v; want one containing %q", name, err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "SECRETVALUE") {
				t.Errorf("%s: error %q shows the secret", name, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: ParseURL = %#v, %v; want %#v", name, got, err, tc.want)
		}
	}
}

func TestCredentialsStayHidden(t *testing.T) {
	cfg := Config{Endpoint: "127.0.0.1:1", Bucket: "b", AccessKey: "ACCESSVALUE", SecretKey: "SECRETVALUE"}
	for _, s := range []string{cfg.String(), fmt.Sprintf("%v %+v %#v %s", cfg, cfg, cfg, cfg)} {
		if strings.Contains(s, "SECRETVALUE") || strings.Contains(s, "ACCESSVALUE") {
			t.Errorf("formatted config shows credentials: %s", s)
		}
	}
	// An unreachable endpoint: the error must name it but not the keys.
	_, err := New(context.Background(), cfg)
	if err == nil {
		t.Fatal("New against a closed port succeeded")
	}
	if strings.Contains(err.Error(), "SECRETVALUE") || strings.Contains(err.Error(), "ACCESSVALUE") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("error %q shows credentials or hides the endpoint", err)
	}
	if scrubbed := scrub(cfg, errors.New("denied for ACCESSVALUE/SECRETVALUE")); strings.Contains(scrubbed.Error(), "VALUE") {
		t.Errorf("scrub left credentials in %q", scrubbed)
	}
}

func TestWrongCredentials(t *testing.T) {
	cfg := testConfig(t)
	cfg.SecretKey = "WRONGSECRETVALUE"
	_, err := New(context.Background(), cfg)
	if err == nil {
		t.Fatal("New with a wrong secret key succeeded")
	}
	if strings.Contains(err.Error(), cfg.SecretKey) || strings.Contains(err.Error(), cfg.AccessKey) {
		t.Errorf("error %q shows credentials", err)
	}
}

func TestMissingBucket(t *testing.T) {
	cfg := testConfig(t)
	cfg.Bucket = "trainyard-missing-bucket"
	cfg.CreateBucket = false
	_, err := New(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("New on a missing bucket: err = %v; want it to say the bucket does not exist", err)
	}
}

func TestSpooledPutIsAtomicOnFailure(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	// A non-seekable reader larger than the in-memory limit that fails
	// half way: nothing may be stored.
	r := io.MultiReader(bytes.NewReader(make([]byte, memLimit+1)), errReader{})
	if _, err := s.Put(ctx, "partial", r, -1); err == nil {
		t.Fatal("Put from a failing reader succeeded")
	}
	if _, err := s.Stat(ctx, "partial"); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Stat after a failed Put: err = %v; want ErrNotFound", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("source broke") }

func BenchmarkPutGet256MiB(b *testing.B) {
	blobtest.BenchmarkPutGet(b, newStore(b), 256<<20)
}
