package imagepin_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"trainyard/internal/domain"
	"trainyard/internal/imagepin"
)

// testRegistry is a real in-memory OCI registry on a loopback port,
// serving plain HTTP.
type testRegistry struct {
	host string // host:port, as image references name it
	srv  *httptest.Server
}

func newRegistry(t *testing.T, wrap func(http.Handler) http.Handler) *testRegistry {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return &testRegistry{host: u.Host, srv: srv}
}

// push writes a random image as repo:tag and returns its digest.
func (r *testRegistry) push(t *testing.T, repoTag string, opts ...remote.Option) string {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(r.host+"/"+repoTag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, opts...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

func pinner(t *testing.T, cfg imagepin.Config) *imagepin.Pinner {
	t.Helper()
	if cfg.Keychain == nil {
		cfg.Keychain = authn.NewMultiKeychain() // anonymous: never the test machine's docker config
	}
	p, err := imagepin.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPinTag(t *testing.T) {
	reg := newRegistry(t, nil)
	digest := reg.push(t, "torch:2.4")
	p := pinner(t, imagepin.Config{Insecure: []string{reg.host}})
	ctx := context.Background()

	got, err := p.Pin(ctx, reg.host+"/torch:2.4")
	if want := reg.host + "/torch:2.4@" + digest; err != nil || got != want {
		t.Fatalf("Pin(tag) = %q, %v; want %q", got, err, want)
	}
	// No tag: the tag asked, latest, is written out.
	latest := reg.push(t, "torch:latest")
	if got, err := p.Pin(ctx, reg.host+"/torch"); err != nil || got != reg.host+"/torch:latest@"+latest {
		t.Fatalf("Pin(no tag) = %q, %v", got, err)
	}
	// By digest: kept as written, once the registry confirmed it.
	for _, ref := range []string{reg.host + "/torch@" + digest, reg.host + "/torch:2.4@" + digest} {
		if got, err := p.Pin(ctx, ref); err != nil || got != ref {
			t.Fatalf("Pin(%s) = %q, %v", ref, got, err)
		}
	}
	// The tag moves: the new digest.
	moved := reg.push(t, "torch:2.4")
	if moved == digest {
		t.Fatal("random images collided")
	}
	if got, err := p.Pin(ctx, reg.host+"/torch:2.4"); err != nil || imagepin.Digest(got) != moved {
		t.Fatalf("Pin(moved tag) = %q, %v; want digest %s", got, err, moved)
	}
}

// A multi-platform image is pinned by its index's digest.
func TestPinIndex(t *testing.T) {
	reg := newRegistry(t, nil)
	idx, err := random.Index(256, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(reg.host+"/torch:multi", name.Insecure)
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}
	digest, _ := idx.Digest()
	got, err := pinner(t, imagepin.Config{Insecure: []string{reg.host}}).Pin(context.Background(), reg.host+"/torch:multi")
	if err != nil || got != reg.host+"/torch:multi@"+digest.String() {
		t.Fatalf("Pin(index) = %q, %v; want the index's digest %s", got, err, digest)
	}
}

func TestPinNotFound(t *testing.T) {
	reg := newRegistry(t, nil)
	digest := reg.push(t, "torch:2.4")
	p := pinner(t, imagepin.Config{Insecure: []string{reg.host}})
	for ref, want := range map[string]string{
		reg.host + "/torch:2.5":                               "registry " + reg.host + " has no image torch:2.5 (it answered 404 Not Found",
		reg.host + "/nope:1":                                  "registry " + reg.host + " has no image nope:1 (it answered 404 Not Found",
		reg.host + "/nope@" + digest:                          "registry " + reg.host + " has no image nope@" + digest,
		reg.host + "/torch@sha256:" + strings.Repeat("0", 64): "has no image torch@sha256:000",
	} {
		_, err := p.Pin(context.Background(), ref)
		if !errors.Is(err, domain.ErrNotFound) || !strings.Contains(err.Error(), want) {
			t.Errorf("Pin(%s) = %v; want not found: %q", ref, err, want)
		}
	}
}

func TestPinInvalid(t *testing.T) {
	p := pinner(t, imagepin.Config{})
	for ref, lowercase := range map[string]bool{"Registry.example.com/Torch:2.4": true, "Bad/Ref:1": true,
		"torch:bad tag": false, "torch@sha256:abc": false, "Registry.example.com/torch:V 1": false} {
		_, err := p.Pin(context.Background(), ref)
		if !errors.Is(err, domain.ErrInvalid) || !strings.Contains(err.Error(), "is not an image reference") {
			t.Errorf("Pin(%q) = %v; want invalid", ref, err)
		}
		if hint := strings.Contains(fmt.Sprint(err), "a repository's name is lowercase"); hint != lowercase {
			t.Errorf("Pin(%q) = %v; want the lowercase hint: %v", ref, err, lowercase)
		}
	}
}

// A registry that serves plain HTTP is asked over HTTPS unless it is
// configured as insecure, even on a loopback address.
func TestPinPlainHTTPOnlyWhenInsecure(t *testing.T) {
	reg := newRegistry(t, nil)
	reg.push(t, "torch:2.4")
	_, err := pinner(t, imagepin.Config{}).Pin(context.Background(), reg.host+"/torch:2.4")
	if !errors.Is(err, domain.ErrUnavailable) || !strings.Contains(err.Error(), "answers plain HTTP") ||
		!strings.Contains(err.Error(), "envs.insecure_registries") {
		t.Fatalf("Pin over HTTPS from a plain-HTTP registry = %v", err)
	}
}

// HTTPS with credentials from the keychain; a refusal names the registry
// and its answer, never the credentials.
func TestPinHTTPSWithCredentials(t *testing.T) {
	const user, secret = "robot", "s3cret-Pa55"
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, pw, ok := r.BasicAuth(); !ok || u != user || pw != secret {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
			return
		}
		h.ServeHTTP(w, r)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted-certificate case below
	srv.StartTLS()
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "https://")
	ref, _ := name.ParseReference(host + "/torch:2.4")
	img, _ := random.Image(256, 1)
	good := authn.FromConfig(authn.AuthConfig{Username: user, Password: secret})
	if err := remote.Write(ref, img, remote.WithTransport(srv.Client().Transport), remote.WithAuth(good)); err != nil {
		t.Fatal(err)
	}
	digest, _ := img.Digest()

	p := pinner(t, imagepin.Config{Transport: srv.Client().Transport, Keychain: keychain{host: host, auth: good}})
	if got, err := p.Pin(context.Background(), host+"/torch:2.4"); err != nil || got != host+"/torch:2.4@"+digest.String() {
		t.Fatalf("Pin with credentials = %q, %v", got, err)
	}
	wrong := authn.FromConfig(authn.AuthConfig{Username: user, Password: "wrong-" + secret})
	p = pinner(t, imagepin.Config{Transport: srv.Client().Transport, Keychain: keychain{host: host, auth: wrong}})
	_, err := p.Pin(context.Background(), host+"/torch:2.4")
	if !errors.Is(err, domain.ErrUnavailable) || !strings.Contains(err.Error(), "refused the server access to torch (it answered 401 Unauthorized") {
		t.Fatalf("Pin with wrong credentials = %v", err)
	}
	if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), user) {
		t.Fatalf("the error shows credentials: %v", err)
	}
	// Anonymous, against a registry whose certificate is not trusted.
	_, err = pinner(t, imagepin.Config{}).Pin(context.Background(), host+"/torch:2.4")
	if !errors.Is(err, domain.ErrUnavailable) || !strings.Contains(err.Error(), "cannot reach registry "+host+": ") ||
		!strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Pin against an untrusted certificate = %v", err)
	}
}

type keychain struct {
	host string
	auth authn.Authenticator
}

func (k keychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if r.RegistryStr() == k.host {
		return k.auth, nil
	}
	return authn.Anonymous, nil
}

func TestPinUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := l.Addr().String()
	l.Close() // nothing listens there now
	_, err = pinner(t, imagepin.Config{Insecure: []string{host}}).Pin(context.Background(), host+"/torch:2.4")
	if !errors.Is(err, domain.ErrUnavailable) || !strings.Contains(err.Error(), "cannot reach registry "+host+": ") ||
		!strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Pin against a closed port = %v", err)
	}
}

// A registry that never answers delays a Pin by the timeout, no more.
func TestPinTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	host := strings.TrimPrefix(srv.URL, "http://")
	p := pinner(t, imagepin.Config{Insecure: []string{host}, Timeout: 200 * time.Millisecond})
	start := time.Now()
	_, err := p.Pin(context.Background(), host+"/torch:2.4")
	if !errors.Is(err, domain.ErrUnavailable) || !strings.Contains(err.Error(), "did not answer within 200ms") {
		t.Fatalf("Pin against a silent registry = %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Pin took %v with a 200ms timeout", took)
	}
}

// A registry that does not answer HEAD with the digest is asked with GET.
func TestPinFallsBackToGet(t *testing.T) {
	for name, head := range map[string]func(http.ResponseWriter){
		"HEAD not allowed": func(w http.ResponseWriter) { w.WriteHeader(http.StatusMethodNotAllowed) },
		"no digest header": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			w.Header().Set("Content-Length", "10")
			w.WriteHeader(http.StatusOK)
		},
	} {
		t.Run(name, func(t *testing.T) {
			var heads, gets atomic.Int32
			var pushed atomic.Bool
			reg := newRegistry(t, func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if pushed.Load() && strings.Contains(r.URL.Path, "/manifests/") {
						switch r.Method {
						case http.MethodHead:
							heads.Add(1)
							head(w)
							return
						case http.MethodGet:
							gets.Add(1)
						}
					}
					h.ServeHTTP(w, r)
				})
			})
			digest := reg.push(t, "torch:2.4")
			pushed.Store(true)
			got, err := pinner(t, imagepin.Config{Insecure: []string{reg.host}}).Pin(context.Background(), reg.host+"/torch:2.4")
			if err != nil || got != reg.host+"/torch:2.4@"+digest || heads.Load() != 1 || gets.Load() != 1 {
				t.Fatalf("Pin = %q, %v after %d HEADs and %d GETs", got, err, heads.Load(), gets.Load())
			}
		})
	}
}

func TestCheckRegistries(t *testing.T) {
	if err := imagepin.CheckRegistries([]string{"localhost:5000", "127.0.0.1:5000", "registry.local"}); err != nil {
		t.Fatal(err)
	}
	err := imagepin.CheckRegistries([]string{"", "http://localhost:5000", "localhost:5000/ml"})
	for _, want := range []string{"[0]: is empty", `[1]: "http://localhost:5000" has a scheme; name the registry alone, e.g. localhost:5000`, `[2]: "localhost:5000/ml" is not a registry host`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckRegistries = %v; want %q", err, want)
		}
	}
}
