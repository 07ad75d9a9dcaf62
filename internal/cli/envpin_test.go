package cli

import (
	"context"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"trainyard/internal/api"
	"trainyard/internal/imagepin"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite"
)

// env register and env show print the image as the server stored it:
// pinned by digest when the registry answered, marked as by tag when it
// could not be asked; an image the registry has not is refused.
func TestEnvRegisterPrintsPinnedImage(t *testing.T) {
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	u, _ := url.Parse(reg.URL)
	host := u.Host
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.ParseReference(host+"/torch:2.4", name.Insecure)
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	digest, _ := img.Digest()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close() // a registry that cannot be reached

	pinner, err := imagepin.New(imagepin.Config{Insecure: []string{host, down}, Keychain: authn.NewMultiKeychain()})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	svc := service.New(service.Config{Store: st, Images: pinner, Logger: slog.New(slog.DiscardHandler)})
	token, err := svc.Identity.Bootstrap(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler(api.Config{Service: svc}))
	t.Cleanup(func() { srv.Close(); st.Close() })
	h := &harness{t: t, srv: &fakeServer{t: t, srv: srv}, vars: map[string]string{
		EnvServer: srv.URL, EnvToken: token, "XDG_CONFIG_HOME": t.TempDir(), "NO_COLOR": ""}}

	pinned := host + "/torch:2.4@" + digest.String()
	r := h.mustRun(0, "env", "register", "torch", "--image", host+"/torch:2.4")
	if r.stdout != "torch@1\n" || !strings.Contains(r.stderr, "image "+host+"/torch:2.4 pinned by digest: "+pinned+"\n") {
		t.Fatalf("register by tag: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	if r := h.mustRun(0, "env", "show", "torch@1"); !strings.Contains(r.stdout, "Image:       "+pinned+"\n") {
		t.Fatalf("env show:\n%s", r.stdout)
	}
	if r := h.mustRun(0, "env", "ls"); !strings.Contains(r.stdout, host+"/torch:2.4@"+digest.String()[:len("sha256:")+12]+"…") {
		t.Fatalf("env ls:\n%s", r.stdout)
	}
	if r := h.mustRun(0, "env", "ls", "-o", "wide"); !strings.Contains(r.stdout, pinned) {
		t.Fatalf("env ls -o wide:\n%s", r.stdout)
	}

	r = h.mustRun(0, "env", "register", "offline", "--image", down+"/torch:2.4")
	if !strings.Contains(r.stderr, "warning: image "+down+"/torch:2.4 is stored by its tag, not pinned by digest: cannot reach registry "+down) ||
		strings.Contains(r.stderr, "\nimage ") {
		t.Fatalf("register with the registry down: stderr %q", r.stderr)
	}
	if r := h.mustRun(0, "env", "show", "offline"); !strings.Contains(r.stdout, "Image:       "+down+"/torch:2.4 (by tag, not pinned by digest)\n") {
		t.Fatalf("env show of an image by tag:\n%s", r.stdout)
	}

	r = h.mustRun(2, "env", "register", "torch", "--image", host+"/torch:9")
	if !strings.Contains(r.stderr, "image: registry "+host+" has no image torch:9") {
		t.Fatalf("register an unknown tag: stderr %q", r.stderr)
	}
}
