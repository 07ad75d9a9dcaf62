package service_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"trainyard/internal/domain"
	"trainyard/internal/imagepin"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite/sqlitetest"
)

// pinEnv is a service whose environments' images are pinned against a
// real in-memory OCI registry on a loopback port (plain HTTP, configured
// as insecure).
type pinEnv struct {
	svc  *service.Service
	host string // the registry, as image references name it
	down string // a registry that cannot be reached (a closed port)
}

func newPinEnv(t *testing.T, required bool) pinEnv {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close() // nothing listens there now
	pinner, err := imagepin.New(imagepin.Config{Insecure: []string{u.Host, down}, Keychain: authn.NewMultiKeychain()})
	if err != nil {
		t.Fatal(err)
	}
	st := sqlitetest.Open(t, t.TempDir())
	return pinEnv{svc: service.New(service.Config{Store: st, Images: pinner, RequirePinnedImages: required}), host: u.Host, down: down}
}

// push writes a new random image as repo:tag and returns its digest.
func (e pinEnv) push(t *testing.T, repoTag string) string {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(e.host+"/"+repoTag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	d, _ := img.Digest()
	return d.String()
}

func imageDef(image string) service.EnvDefinition {
	return service.EnvDefinition{Name: "torch", Image: image}
}

// imageMessage returns the message of the single field error on image.
func imageMessage(t *testing.T, err error) string {
	t.Helper()
	var fe domain.FieldErrors
	if !errors.As(err, &fe) || len(fe) != 1 || fe[0].Path != "image" {
		t.Fatalf("err = %v, want one field error on image", err)
	}
	return fe[0].Message
}

// An image by tag is stored pinned by the digest the registry serves; a
// tag that moves changes no stored version, and the next registration
// pins the new digest.
func TestRegisterEnvPinsImageByDigest(t *testing.T) {
	e := newPinEnv(t, false)
	ctx := context.Background()
	first := e.push(t, "torch:2.4")
	tag := e.host + "/torch:2.4"

	r, err := e.svc.Envs.Registration(ctx, admin, imageDef(tag))
	if err != nil || !r.Created || len(r.Warnings) != 0 {
		t.Fatalf("Registration = %+v, %v", r, err)
	}
	if want := tag + "@" + first; r.Env.Image != want || r.Env.Digest != domain.EnvDigest(r.Env) {
		t.Fatalf("stored image %q (digest %s), want %q", r.Env.Image, r.Env.Digest, want)
	}
	// The same tag, not moved: the same definition, version 1.
	if r, err := e.svc.Envs.Registration(ctx, admin, imageDef(tag)); err != nil || r.Created || r.Env.Version != 1 {
		t.Fatalf("registering the unmoved tag again = %+v, %v; want version 1, not created", r, err)
	}

	moved := e.push(t, "torch:2.4")
	r, err = e.svc.Envs.Registration(ctx, admin, imageDef(tag))
	if err != nil || !r.Created || r.Env.Version != 2 || r.Env.Image != tag+"@"+moved {
		t.Fatalf("registering the moved tag = %+v, %v; want version 2 pinned to %s", r, err, moved)
	}
	if v1, err := e.svc.Envs.GetEnv(ctx, admin, "torch", 1); err != nil || v1.Image != tag+"@"+first {
		t.Fatalf("version 1 after the tag moved = %q, %v; want it still pinned to %s", v1.Image, err, first)
	}
	// Jobs naming version 1 resolve to the first image.
	if v1, err := e.svc.Envs.ResolveEnv(ctx, "torch@1"); err != nil || imagepin.Digest(v1.Image) != first {
		t.Fatalf("ResolveEnv(torch@1) = %q, %v", v1.Image, err)
	}

	// By digest: kept as written (here, the first image, which the
	// registry still has under its digest).
	byDigest := e.host + "/torch@" + first
	if r, err := e.svc.Envs.Registration(ctx, admin, imageDef(byDigest)); err != nil || !r.Created || r.Env.Image != byDigest {
		t.Fatalf("registering by digest = %+v, %v; want the reference kept", r, err)
	}
}

// What the registry does not have is refused, with its answer and what to
// do; nothing is stored.
func TestRegisterEnvRefusesUnknownImage(t *testing.T) {
	e := newPinEnv(t, false)
	ctx := context.Background()
	digest := e.push(t, "torch:2.4")
	for ref, want := range map[string]string{
		e.host + "/torch:9":         "registry " + e.host + " has no image torch:9 (it answered 404 Not Found",
		e.host + "/nope:2.4":        "registry " + e.host + " has no image nope:2.4",
		e.host + "/nope@" + digest:  "registry " + e.host + " has no image nope@" + digest,
		e.host + "/Torch:2.4":       "is not an image reference",
		e.host + "/torch:2.4:extra": "is not an image reference",
	} {
		_, err := e.svc.Envs.Registration(ctx, admin, imageDef(ref))
		msg := imageMessage(t, err)
		if !strings.Contains(msg, want) {
			t.Errorf("registering %s: %q; want it to say %q", ref, msg, want)
		}
		if strings.Contains(want, "has no image") && !strings.Contains(msg, "check the repository and the tag or digest (or push the image first)") {
			t.Errorf("registering %s: %q; want what to do", ref, msg)
		}
	}
	if list, err := e.svc.Envs.ListEnvs(ctx, admin, ""); err != nil || len(list) != 0 {
		t.Fatalf("after refusals: %+v, %v; want no environment", list, err)
	}
}

// A registry that cannot be reached: by default the tag is kept, with a
// warning; with pinning required, registering is refused. An image by
// digest is pinned already and kept either way.
func TestRegisterEnvUnreachableRegistry(t *testing.T) {
	ctx := context.Background()
	for _, required := range []bool{false, true} {
		e := newPinEnv(t, required)
		host := e.down
		tag := host + "/torch:2.4"
		r, err := e.svc.Envs.Registration(ctx, admin, imageDef(tag))
		if required {
			msg := imageMessage(t, err)
			for _, want := range []string{"cannot pin " + tag + " by digest: cannot reach registry " + host, "connection refused",
				"envs.pin_images: required", "give the image by digest (" + tag + "@sha256:...)"} {
				if !strings.Contains(msg, want) {
					t.Errorf("required, unreachable: %q; want it to say %q", msg, want)
				}
			}
		} else {
			if err != nil || !r.Created || r.Env.Image != tag || len(r.Warnings) != 1 {
				t.Fatalf("unreachable registry = %+v, %v; want the tag kept with one warning", r, err)
			}
			for _, want := range []string{"image " + tag + " is stored by its tag, not pinned by digest: cannot reach registry " + host,
				"register the environment again once the server can reach the registry"} {
				if !strings.Contains(r.Warnings[0], want) {
					t.Errorf("warning %q; want it to say %q", r.Warnings[0], want)
				}
			}
		}
		byDigest := host + "/torch@sha256:" + strings.Repeat("ab", 32)
		def := imageDef(byDigest)
		def.Name = "pinned"
		if r, err := e.svc.Envs.Registration(ctx, admin, def); err != nil || !r.Created || r.Env.Image != byDigest || len(r.Warnings) != 0 {
			t.Fatalf("by digest, unreachable registry (required %v) = %+v, %v; want it kept without a warning", required, r, err)
		}
	}
}
