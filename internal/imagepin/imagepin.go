// Package imagepin pins container image references by digest: it asks an
// image's registry, through the OCI distribution API, which manifest a
// tag names now, so that an environment version records exactly what its
// jobs run (docs/envs.md).
//
// The registry is asked with one HEAD of the manifest (a GET when the
// registry answers a HEAD without the digest), anonymously or with the
// credentials the server's docker config holds for it, within a timeout.
// Registries are reached over HTTPS, except those the server is
// configured to trust as insecure, which may answer over plain HTTP.
// Errors name the registry and its answer, never credentials.
package imagepin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"trainyard/internal/domain"
)

// DefaultTimeout bounds one Pin when Config.Timeout is not set: a slow
// registry delays registering an environment by at most this long.
const DefaultTimeout = 5 * time.Second

// Config configures a Pinner.
type Config struct {
	// Insecure lists the registries, as image references name them
	// (host or host:port, e.g. localhost:5000), that may be reached over
	// plain HTTP. Every other registry is reached over HTTPS only, even
	// on a loopback or private address.
	Insecure []string
	// Timeout bounds one Pin: ping, token exchange and manifest request
	// together (0: DefaultTimeout).
	Timeout time.Duration
	// Keychain finds a registry's credentials (nil:
	// authn.DefaultKeychain, the docker config of the user the server
	// runs as: $DOCKER_CONFIG/config.json or ~/.docker/config.json).
	Keychain authn.Keychain
	// Transport carries the requests (nil: a clone of
	// http.DefaultTransport, which honours the proxy environment).
	Transport http.RoundTripper
}

// Pinner resolves image references to digests. Safe for concurrent use.
type Pinner struct {
	insecure map[string]bool
	timeout  time.Duration
	keychain authn.Keychain
	base     http.RoundTripper
}

// CheckRegistries checks a list of registries for Config.Insecure (see
// CheckRegistry). It returns one error naming every bad entry by its index.
func CheckRegistries(list []string) error {
	var bad []string
	for i, r := range list {
		if err := CheckRegistry(r); err != nil {
			bad = append(bad, fmt.Sprintf("[%d]: %v", i, err))
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// CheckRegistry checks one registry for Config.Insecure: a host or
// host:port as image references name it, without a scheme or a path.
func CheckRegistry(r string) error {
	if msg := registryProblem(r); msg != "" {
		return errors.New(msg)
	}
	return nil
}

func registryProblem(r string) string {
	switch {
	case r == "":
		return "is empty; name a registry as images name it, e.g. localhost:5000"
	case strings.Contains(r, "://"):
		return fmt.Sprintf("%q has a scheme; name the registry alone, e.g. %s", r, r[strings.Index(r, "://")+3:])
	case strings.ContainsAny(r, "/@ "):
		return fmt.Sprintf("%q is not a registry host; name it as images do, host or host:port, e.g. localhost:5000", r)
	}
	if _, err := name.NewRegistry(r, name.StrictValidation); err != nil {
		return fmt.Sprintf("%q is not a registry host (%v); name it as images do, host or host:port, e.g. localhost:5000", r, err)
	}
	return ""
}

// New returns a Pinner; it fails when Config.Insecure names something
// that is not a registry.
func New(cfg Config) (*Pinner, error) {
	if err := CheckRegistries(cfg.Insecure); err != nil {
		return nil, fmt.Errorf("insecure registries %w", err)
	}
	p := &Pinner{insecure: map[string]bool{}, timeout: cfg.Timeout, keychain: cfg.Keychain, base: cfg.Transport}
	for _, r := range cfg.Insecure {
		p.insecure[r] = true
	}
	if p.timeout <= 0 {
		p.timeout = DefaultTimeout
	}
	if p.keychain == nil {
		p.keychain = authn.DefaultKeychain
	}
	if p.base == nil {
		p.base = http.DefaultTransport.(*http.Transport).Clone()
	}
	return p, nil
}

// Pin returns ref pinned by the digest of the manifest its registry
// serves now: "name:tag@sha256:…", keeping ref as it was written and its
// tag for readability (":latest" added when ref names none, as that is
// the tag asked). A ref already by digest is returned unchanged once the
// registry confirmed it has that manifest.
//
// Errors match domain.ErrInvalid (ref is not an image reference),
// domain.ErrNotFound (the registry answered that it has no such
// repository, tag or digest) or domain.ErrUnavailable (the registry
// could not be asked: unreachable, too slow, refused the credentials, or
// answered with an error). Each names the registry and its answer.
func (p *Pinner) Pin(ctx context.Context, ref string) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", domain.Errorf(domain.ErrInvalid, "%q is not an image reference: %s%s", ref, clip(err.Error()), lowercaseHint(ref))
	}
	reg := r.Context().RegistryStr()
	if p.insecure[reg] {
		if r, err = name.ParseReference(ref, name.Insecure); err != nil {
			return "", domain.Errorf(domain.ErrInvalid, "%q is not an image reference: %s", ref, clip(err.Error()))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	rt := &roundTripper{base: p.base, insecure: p.insecure[reg]}
	opts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithTransport(rt),
		remote.WithAuthFromKeychain(p.keychain),
		// One try: the timeout is short, and whoever registers can
		// simply try again.
		remote.WithRetryPredicate(func(error) bool { return false }),
		remote.WithUserAgent("trainyard"),
	}
	desc, err := remote.Head(r, opts...)
	if err != nil && headFallback(err, rt) {
		// Some registries answer HEAD without Docker-Content-Digest or
		// not at all: GET the manifest, whose digest is computed from it.
		var d *remote.Descriptor
		if d, err = remote.Get(r, opts...); err == nil {
			desc = &d.Descriptor
		}
	}
	if err != nil {
		return "", p.explain(ctx, r, rt, err)
	}
	if _, ok := r.(name.Digest); ok {
		return ref, nil
	}
	return withTag(ref) + "@" + desc.Digest.String(), nil
}

// Digest returns the digest a pinned reference names ("" for none).
func Digest(ref string) string {
	if _, d, ok := strings.Cut(ref, "@"); ok {
		return d
	}
	return ""
}

// lowercaseHint says so when a reference that does not parse has capitals
// in its repository, which references may not (tags and hosts may).
func lowercaseHint(ref string) string {
	repo, _, _ := strings.Cut(ref, "@")
	if i := strings.LastIndex(repo, "/"); strings.Contains(repo[i+1:], ":") {
		repo = repo[:i+1+strings.Index(repo[i+1:], ":")]
	}
	if host, rest, ok := strings.Cut(repo, "/"); ok && (strings.ContainsAny(host, ".:") || host == "localhost") {
		repo = rest
	}
	if repo != strings.ToLower(repo) {
		return " (a repository's name is lowercase)"
	}
	return ""
}

// withTag is ref with ":latest" added when it names no tag.
func withTag(ref string) string {
	last := ref[strings.LastIndex(ref, "/")+1:]
	if strings.Contains(last, ":") {
		return ref
	}
	return ref + ":latest"
}

// headFallback says whether a failed HEAD is worth a GET: the registry
// answered, but not with a status that settles the question.
func headFallback(err error, rt *roundTripper) bool {
	var terr *transport.Error
	if errors.As(err, &terr) {
		switch terr.StatusCode {
		case http.StatusNotFound, http.StatusUnauthorized, http.StatusForbidden, http.StatusTooManyRequests:
			return false
		}
		return terr.StatusCode < 500
	}
	return rt.netErr() == nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
}

// explain turns a failed request into an error that says what the
// registry answered (or why it could not be asked), without credentials.
func (p *Pinner) explain(ctx context.Context, r name.Reference, rt *roundTripper, err error) error {
	reg := r.Context().RegistryStr()
	what := r.Context().RepositoryStr() + ":" + r.Identifier()
	if _, ok := r.(name.Digest); ok {
		what = r.Context().RepositoryStr() + "@" + r.Identifier()
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return domain.Errorf(domain.ErrUnavailable, "registry %s did not answer within %s", reg, p.timeout)
	}
	if ctx.Err() != nil {
		return ctx.Err() // the caller gave up
	}
	var terr *transport.Error
	if errors.As(err, &terr) {
		answer := statusText(terr)
		switch terr.StatusCode {
		case http.StatusNotFound:
			return domain.Errorf(domain.ErrNotFound, "registry %s has no image %s (it answered %s)", reg, what, answer)
		case http.StatusUnauthorized, http.StatusForbidden:
			return domain.Errorf(domain.ErrUnavailable, "registry %s refused the server access to %s (it answered %s); the server asks with the credentials of its docker config, or anonymously when it has none there", reg, r.Context().RepositoryStr(), answer)
		}
		return domain.Errorf(domain.ErrUnavailable, "registry %s answered %s for %s", reg, answer, what)
	}
	if nerr := rt.netErr(); nerr != nil {
		msg := clip(nerr.Error())
		var rerr tls.RecordHeaderError
		if errors.As(nerr, &rerr) || strings.Contains(msg, "HTTP response to HTTPS client") {
			return domain.Errorf(domain.ErrUnavailable, "registry %s answers plain HTTP, which the server uses only for registries it is configured to trust as insecure (envs.insecure_registries)", reg)
		}
		return domain.Errorf(domain.ErrUnavailable, "cannot reach registry %s: %s", reg, msg)
	}
	return domain.Errorf(domain.ErrUnavailable, "cannot ask registry %s about %s: %s", reg, what, clip(err.Error()))
}

// statusText is the status and the registry's error codes, e.g.
// "404 Not Found: MANIFEST_UNKNOWN manifest unknown".
func statusText(e *transport.Error) string {
	s := fmt.Sprintf("%d %s", e.StatusCode, http.StatusText(e.StatusCode))
	var parts []string
	for _, d := range e.Errors {
		parts = append(parts, strings.TrimSpace(string(d.Code)+" "+d.Message))
	}
	if len(parts) > 0 {
		s += ": " + strings.Join(parts, "; ")
	}
	return clip(s)
}

// clip keeps a registry's text printable and short.
func clip(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > 300 {
		s = strings.ToValidUTF8(s[:300], "") + "…"
	}
	return s
}

// roundTripper is the bottom of one Pin's transport: it keeps every
// request on HTTPS unless the registry is trusted as insecure (the
// library tries plain HTTP on loopback and private addresses by itself),
// and remembers whether the last round trip failed and why, which the
// library's own errors do not always carry. (An insecure registry's
// HTTPS ping fails before its HTTP one succeeds: only the last counts.)
type roundTripper struct {
	base     http.RoundTripper
	insecure bool

	mu  sync.Mutex
	err error
}

func (t *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !t.insecure {
		u := *req.URL
		u.Scheme = "https"
		req = req.Clone(req.Context())
		req.URL = &u
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil && req.Context().Err() != nil {
		return resp, err // canceled: the loser of the library's HTTPS/HTTP race, or the timeout
	}
	t.mu.Lock()
	t.err = nil
	if err != nil {
		t.err = transportError(err)
	}
	t.mu.Unlock()
	return resp, err
}

func (t *roundTripper) netErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// transportError strips what a failed round trip says about the request
// (its URL) down to why it failed: a dial, DNS or TLS error.
func transportError(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	var (
		oerr *net.OpError
		derr *net.DNSError
		cerr *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &derr):
		return derr
	case errors.As(err, &cerr):
		return cerr
	case errors.As(err, &oerr):
		return oerr
	}
	return err
}
