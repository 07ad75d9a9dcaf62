package service

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// IdentityService authenticates callers and manages users, roles and
// tokens.
type IdentityService struct {
	*core
	st IdentityStore
}

// IdentityStore is what authentication and identity administration read
// and write: users, their roles and their tokens.
type IdentityStore interface {
	CountTokens(ctx context.Context) (int, error)
	CreateToken(ctx context.Context, t store.Token, audit domain.AuditRecord) (store.Token, error)
	CreateUser(ctx context.Context, u domain.User, audit domain.AuditRecord) (domain.User, error)
	GetToken(ctx context.Context, id int64) (store.Token, error)
	GetUser(ctx context.Context, name string) (domain.User, error)
	GrantRole(ctx context.Context, user string, b domain.RoleBinding, at time.Time, audit domain.AuditRecord) (created bool, err error)
	ListTokens(ctx context.Context, subject string) ([]store.Token, error)
	ListUsers(ctx context.Context) ([]domain.User, error)
	RevokeRole(ctx context.Context, user string, b domain.RoleBinding, audit domain.AuditRecord) error
	CreateTokens(ctx context.Context, ts []store.Token, audit ...domain.AuditRecord) error
	DeleteTokens(ctx context.Context, ids []int64, audit ...domain.AuditRecord) (int, error)
	RevokeToken(ctx context.Context, id int64, at time.Time, audit domain.AuditRecord) (store.Token, error)
	TokenByHash(ctx context.Context, hash string) (store.Token, error)
}

var _ IdentityStore = store.Store(nil)

// Token is a stored API token (its Hash is blanked in every answer).
type Token = store.Token

// BootstrapUser is the first admin, created with the store.
const BootstrapUser = "admin"

// Failed authentications are limited by token buckets: one per client
// address and one per presented token prefix, each a burst of authFailBurst
// refilled at authFailBurst per authFailWindow. Only failures spend them, and
// a valid token is never refused by them: every job calls the API from the
// address of its node (often 127.0.0.1), so one job sending bad tokens must
// not lock out the users and the other jobs' progress reports there.
const (
	authFailBurst  = 10
	authFailWindow = time.Minute
	// tokenPrefixLen is how much of a presented token keys its bucket: "ty_"
	// and 9 hex digits, about what a screenshot or a cut-off log line shows.
	// Tokens carry no public id, so guesses that complete a token whose
	// start leaked are limited this way, whichever addresses they come from.
	tokenPrefixLen = 12
)

// RateLimitedError refuses a token that failed to authenticate after too
// many failures from the same address or with the same token prefix. The
// API answers 429 with a Retry-After header.
type RateLimitedError struct {
	RetryAfter time.Duration
	// Scope is the limit reached: "address" or "token".
	Scope string
	// Reason is why the token itself was refused.
	Reason string
}

func (e *RateLimitedError) Error() string {
	by := "from this address"
	if e.Scope == "token" {
		by = "with tokens starting like this one"
	}
	return fmt.Sprintf("%s; too many failed authentications came %s, so further failures are refused for %d s (a valid token is accepted at once)",
		e.Reason, by, int(math.Ceil(e.RetryAfter.Seconds())))
}

// failLimiter holds the token buckets of failed authentications, keyed by
// failKeys; only failures spend them.
type failLimiter struct {
	mu      sync.Mutex
	buckets map[failKey]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

const refillPerSecond = float64(authFailBurst) / float64(authFailWindow/time.Second)

// refill brings b up to now and returns its tokens.
func (b *bucket) refill(now time.Time) float64 {
	if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens = math.Min(authFailBurst, b.tokens+el*refillPerSecond)
	}
	b.last = now
	return b.tokens
}

// failKey names one bucket: its scope ("address" or "token") and the
// address or token prefix.
type failKey struct{ scope, id string }

// failKeys are the buckets a failure from addr with secret spends: the
// address's, and the token prefix's when a token was given.
func failKeys(addr, secret string) []failKey {
	keys := []failKey{{"address", addr}}
	if secret != "" {
		keys = append(keys, failKey{"token", secret[:min(len(secret), tokenPrefixLen)]})
	}
	return keys
}

// blocked reports the longest wait among keys' buckets and the scope of the
// bucket that imposes it, or 0 when none is empty.
func (l *failLimiter) blocked(now time.Time, keys []failKey) (wait time.Duration, scope string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		b, ok := l.buckets[k]
		if !ok {
			continue
		}
		if t := b.refill(now); t < 1 {
			if w := time.Duration((1 - t) / refillPerSecond * float64(time.Second)); w > wait {
				wait, scope = w, k.scope
			}
		}
	}
	return wait, scope
}

// fail spends one token of each of keys' buckets.
func (l *failLimiter) fail(now time.Time, keys []failKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buckets == nil {
		l.buckets = map[failKey]*bucket{}
	}
	for _, k := range keys {
		b, ok := l.buckets[k]
		if !ok {
			if len(l.buckets) >= 4096 { // forget keys whose buckets are full again
				for a, ob := range l.buckets {
					if ob.refill(now) >= authFailBurst {
						delete(l.buckets, a)
					}
				}
			}
			b = &bucket{tokens: authFailBurst, last: now}
			l.buckets[k] = b
		}
		b.refill(now)
		b.tokens = math.Max(0, b.tokens-1)
	}
}

// Authenticate resolves a bearer token to a principal. Every call reads the
// token and its user's roles from the store, so a revoked token, an expired
// one or a revoked role stops working at once. Failures are audited
// ("auth.failed", never with the token text) and limited per client address
// (see WithClient) and per token prefix: past either limit, a token that
// fails answers *RateLimitedError (not audited) until the bucket refills. A
// valid token is checked first and always passes, so the limits never lock
// out a user or a job's reports.
func (s *IdentityService) Authenticate(ctx context.Context, secret string) (Principal, error) {
	now := s.cfg.Clock.Now()
	p, actor, err := s.authenticate(ctx, secret, now)
	if err == nil || !errors.Is(err, domain.ErrUnauthorized) {
		return p, err
	}
	addr := ClientFrom(ctx)
	keys := failKeys(addr, secret)
	if wait, scope := s.limiter.blocked(now, keys); wait > 0 {
		return Principal{}, &RateLimitedError{RetryAfter: wait, Scope: scope, Reason: err.Error()}
	}
	s.limiter.fail(now, keys)
	s.appendAudit(ctx, domain.AuditRecord{At: now, Actor: actor, Action: "auth.failed", Target: "server",
		Result: domain.AuditFailed, Detail: err.Error(), Client: addr})
	return p, err
}

// authenticate does the work of Authenticate; actor names the caller for the
// audit record of a failure.
func (s *IdentityService) authenticate(ctx context.Context, secret string, now time.Time) (p Principal, actor string, err error) {
	actor = "anonymous"
	if secret == "" {
		return Principal{}, actor, domain.Errorf(domain.ErrUnauthorized, "no token given; send an Authorization: Bearer <token> header")
	}
	hash := HashToken(secret)
	gen, ends := s.authGen.Load(), s.jobAuth.ends.Load()
	if e, ok := s.auth.Load(hash); ok {
		e := e.(authEntry)
		if e.gen == gen && (e.expires.IsZero() || now.Before(e.expires)) && (s.cfg.CacheTTL <= 0 || now.Sub(e.at) < s.cfg.CacheTTL) {
			return e.p, actor, nil
		}
		s.auth.Delete(hash)
	}
	tok, err := s.st.TokenByHash(ctx, hash)
	if errors.Is(err, domain.ErrNotFound) {
		return Principal{}, actor, domain.Errorf(domain.ErrUnauthorized, "the token is not known; check TRAINYARD_TOKEN or your config file")
	}
	if err != nil {
		return Principal{}, actor, err
	}
	actor = "token:" + strconv.FormatInt(tok.ID, 10)
	if !tok.RevokedAt.IsZero() {
		return Principal{}, actor, domain.Errorf(domain.ErrUnauthorized, "the token was revoked; ask an admin for a new one")
	}
	if !tok.ExpiresAt.IsZero() && !now.Before(tok.ExpiresAt) {
		return Principal{}, actor, domain.Errorf(domain.ErrUnauthorized, "the token expired at %s; ask an admin for a new one", tok.ExpiresAt.Format(time.RFC3339))
	}
	if tok.Role == string(domain.RoleJob) {
		job, attempt, ok := domain.ParseJobTokenSubject(tok.Subject)
		if !ok {
			return Principal{}, actor, domain.Errorf(domain.ErrUnauthorized, "the job token names no attempt; it cannot be used")
		}
		p := Principal{TokenID: tok.ID, JobID: job, Attempt: attempt}
		s.auth.Store(hash, authEntry{p: p, expires: tok.ExpiresAt, gen: gen, at: now})
		s.jobAuth.add(&s.auth, AttemptRef{JobID: job, Attempt: attempt}, hash, ends)
		return p, actor, nil
	}
	u, err := s.st.GetUser(ctx, tok.Subject)
	if errors.Is(err, domain.ErrNotFound) {
		return Principal{}, actor, domain.Errorf(domain.ErrUnauthorized, "the token's user %q no longer exists; ask an admin for a new token", tok.Subject)
	}
	if err != nil {
		return Principal{}, actor, err
	}
	p = principalOf(u, tok.ID)
	s.auth.Store(hash, authEntry{p: p, expires: tok.ExpiresAt, gen: gen, at: now})
	return p, actor, nil
}

// identityChanged forgets every cached authentication: call it after a
// change to who may do what (a token or role revoked, a role granted), once
// it is stored, so the next request sees it.
func (s *IdentityService) identityChanged() {
	s.invalidate("auth")
	if s.cfg.Broadcast != nil {
		s.cfg.Broadcast("auth")
	}
}

// principalOf builds the principal of user u authenticated by token id.
func principalOf(u domain.User, tokenID int64) Principal {
	p := Principal{Subject: u.Name, TokenID: tokenID}
	for _, b := range u.Roles {
		switch {
		case b.Project == "":
			p.Roles = append(p.Roles, b.Role)
		default:
			p.Projects = append(p.Projects, domain.ProjectRole{Project: b.Project, Role: b.Role})
		}
	}
	for _, r := range []domain.Role{domain.RoleAdmin, domain.RoleResourceAdmin, domain.RoleAuditor} {
		if p.HasGlobal(r) {
			p.Role = r
			break
		}
	}
	domain.SortProjectRoles(p.Projects)
	return p
}

// Bootstrap creates, on a store without tokens, the user "admin" holding the
// global role admin and a token for it, and returns the token's secret; it
// returns "" when tokens already exist.
func (s *IdentityService) Bootstrap(ctx context.Context) (string, error) {
	n, err := s.st.CountTokens(ctx)
	if err != nil || n > 0 {
		return "", err
	}
	now := s.cfg.Clock.Now()
	if _, err := s.st.CreateUser(ctx,
		domain.User{Name: BootstrapUser, CreatedAt: now}, s.auditedAs(ctx, "system:bootstrap", authz.UserWrite, "user/"+BootstrapUser, nil, userSummary{Name: BootstrapUser})); err != nil && !errors.Is(err, domain.ErrConflict) {
		return "", fmt.Errorf("create the bootstrap user: %w", err)
	}
	admin := domain.RoleBinding{Role: domain.RoleAdmin}
	if _, err := s.st.GrantRole(ctx,
		BootstrapUser, admin, now, s.auditedAs(ctx, "system:bootstrap", authz.RoleWrite, "user/"+BootstrapUser, nil, admin.String())); err != nil {
		return "", fmt.Errorf("grant the bootstrap user role admin: %w", err)
	}
	secret := NewTokenSecret()
	if _, err := s.st.CreateToken(ctx,
		store.Token{Name: "bootstrap", Subject: BootstrapUser, Hash: HashToken(secret), CreatedAt: now}, s.auditedAs(ctx, "system:bootstrap", authz.TokenCreate, "user/"+BootstrapUser, nil, tokenSummary{Name: "bootstrap"})); err != nil {
		return "", fmt.Errorf("create bootstrap token: %w", err)
	}
	return secret, nil
}

// Identity is who a principal is, as whoami shows it.
type Identity struct {
	Principal Principal
	Token     store.Token // without its hash; zero for principals built in code
}

// Whoami returns the caller's identity: user, roles and token.
func (s *IdentityService) Whoami(ctx context.Context, p Principal) (Identity, error) {
	id := Identity{Principal: p}
	if p.TokenID != 0 {
		tok, err := s.st.GetToken(ctx, p.TokenID)
		if err != nil {
			return Identity{}, fmt.Errorf("read the caller's token: %w", err)
		}
		tok.Hash = ""
		id.Token = tok
	}
	return id, nil
}

// ListUsers returns every user with its roles.
func (s *IdentityService) ListUsers(ctx context.Context, p Principal) ([]domain.User, error) {
	if err := s.authorize(ctx, p, authz.UserRead, authz.Resource{Kind: "user"}); err != nil {
		return nil, err
	}
	return s.st.ListUsers(ctx)
}

// CreateUser creates a user without roles.
func (s *IdentityService) CreateUser(ctx context.Context, p Principal, name string) (domain.User, error) {
	var errs domain.FieldErrors
	checkName(&errs, "name", name)
	if err := errs.Err(); err != nil {
		return domain.User{}, err
	}
	if err := s.authorize(ctx, p, authz.UserWrite, authz.Resource{Kind: "user", ID: name}); err != nil {
		return domain.User{}, err
	}
	u, err := s.st.CreateUser(ctx,
		domain.User{Name: name, CreatedAt: s.cfg.Clock.Now()}, s.audited(ctx, p, authz.UserWrite, "user/"+name, nil, userSummary{Name: name}))
	if errors.Is(err, domain.ErrConflict) {
		return domain.User{}, domain.Errorf(domain.ErrConflict, "user %q already exists; list users with: trainyard user ls", name)
	}
	return u, err
}

// checkBinding validates a role binding: a known role, with a project exactly
// when the role is a project role.
func checkBinding(b domain.RoleBinding) error {
	var errs domain.FieldErrors
	switch {
	case b.Role.Global() && b.Project != "":
		errs.Add("project", "role %s is global; grant it without a project", b.Role)
	case b.Role.InProject():
		if b.Project == "" {
			errs.Add("project", "role %s is granted in one project; name it, e.g. --project vision", b.Role)
		} else {
			checkName(&errs, "project", b.Project)
		}
	case !b.Role.Global():
		errs.Add("role", "unknown role %q; use one of admin, resource-admin, auditor (global) or lead, member, viewer (per project)", b.Role)
	}
	return errs.Err()
}

// GrantRole gives user the role b. created is false when the user held it.
func (s *IdentityService) GrantRole(ctx context.Context, p Principal, user string, b domain.RoleBinding) (created bool, err error) {
	if err := checkBinding(b); err != nil {
		return false, err
	}
	if err := s.authorize(ctx, p, authz.RoleWrite, authz.Resource{Kind: "role", ID: user, Project: b.Project, Owner: user}); err != nil {
		return false, err
	}
	created, err = s.st.GrantRole(ctx, user, b, s.cfg.Clock.Now(), s.audited(ctx, p, authz.RoleWrite, "user/"+user, nil, b.String()))
	s.identityChanged()
	if errors.Is(err, domain.ErrNotFound) {
		return false, domain.Errorf(domain.ErrNotFound, "user %q does not exist; create it with: trainyard user create %s", user, user)
	}
	return created, err
}

// RevokeRole takes the role b away from user; it takes effect on the user's
// next request.
func (s *IdentityService) RevokeRole(ctx context.Context, p Principal, user string, b domain.RoleBinding) error {
	if err := checkBinding(b); err != nil {
		return err
	}
	if err := s.authorize(ctx, p, authz.RoleWrite, authz.Resource{Kind: "role", ID: user, Project: b.Project, Owner: user}); err != nil {
		return err
	}
	err := s.st.RevokeRole(ctx, user, b, s.audited(ctx, p, authz.RoleWrite, "user/"+user, b.String(), nil))
	s.identityChanged() // also on failure: the role may be gone either way
	if errors.Is(err, domain.ErrNotFound) {
		return domain.Errorf(domain.ErrNotFound, "user %q does not hold role %s; see their roles with: trainyard user ls", user, b)
	}
	return err
}

// TokenInput asks for a new token.
type TokenInput struct {
	User string        // "" means the caller
	Name string        // a label, e.g. "laptop"; "" means "cli"
	TTL  time.Duration // 0: never expires
}

// maxTokenName bounds a token's label.
const maxTokenName = 100

// CreateToken creates a token for in.User and returns its secret (shown
// once; only its hash is stored) and the stored token without the hash.
func (s *IdentityService) CreateToken(ctx context.Context, p Principal, in TokenInput) (secret string, tok store.Token, err error) {
	if in.User == "" {
		in.User = p.Subject
	}
	if in.Name == "" {
		in.Name = "cli"
	}
	var errs domain.FieldErrors
	if len(in.Name) > maxTokenName {
		errs.Add("name", "must be at most %d characters", maxTokenName)
	} else if msg := domain.TextProblem(in.Name, false); msg != "" {
		errs.Add("name", "%s", msg)
	}
	if in.TTL < 0 {
		errs.Add("expires", "must be a positive duration such as 30d, or never")
	}
	if err := errs.Err(); err != nil {
		return "", store.Token{}, err
	}
	if err := s.authorize(ctx, p, authz.TokenCreate, authz.Resource{Kind: "token", Owner: in.User}); err != nil {
		return "", store.Token{}, err
	}
	if _, err := s.st.GetUser(ctx, in.User); err != nil {
		if errors.Is(err, domain.ErrNotFound) {
			return "", store.Token{}, domain.Errorf(domain.ErrNotFound, "user %q does not exist; create it with: trainyard user create %s", in.User, in.User)
		}
		return "", store.Token{}, err
	}
	now := s.cfg.Clock.Now()
	secret = NewTokenSecret()
	tok = store.Token{Name: in.Name, Subject: in.User, Hash: HashToken(secret), CreatedAt: now}
	if in.TTL > 0 {
		tok.ExpiresAt = now.Add(in.TTL)
	}
	sum := tokenSummary{Name: in.Name, User: in.User, ExpiresAt: tok.ExpiresAt}
	tok, err = s.st.CreateToken(ctx, tok, s.audited(ctx, p, authz.TokenCreate, "user/"+in.User, nil, sum))
	if err != nil {
		return "", store.Token{}, fmt.Errorf("store token: %w", err)
	}
	tok.Hash = ""
	return secret, tok, nil
}

// ListTokens returns the tokens of user ("" means the caller; all means
// every user's, for admins and auditors), without their hashes.
func (s *IdentityService) ListTokens(ctx context.Context, p Principal, user string, all bool) ([]store.Token, error) {
	if user == "" && !all {
		user = p.Subject
	}
	if all {
		user = ""
	}
	if err := s.authorize(ctx, p, authz.TokenRead, authz.Resource{Kind: "token", Owner: user}); err != nil {
		return nil, err
	}
	toks, err := s.st.ListTokens(ctx, user)
	if err != nil {
		return nil, err
	}
	for i := range toks {
		toks[i].Hash = ""
	}
	return toks, nil
}

// RevokeToken revokes a token; it stops working on its next use.
func (s *IdentityService) RevokeToken(ctx context.Context, p Principal, id int64) (store.Token, error) {
	ids := strconv.FormatInt(id, 10)
	tok, err := s.st.GetToken(ctx, id)
	if errors.Is(err, domain.ErrNotFound) {
		return store.Token{}, domain.Errorf(domain.ErrNotFound, "token %s does not exist; list yours with: trainyard token ls", ids)
	}
	if err != nil {
		return store.Token{}, err
	}
	if err := s.authorize(ctx, p, authz.TokenRevoke, authz.Resource{Kind: "token", ID: ids, Owner: tok.Subject}); err != nil {
		return store.Token{}, err
	}
	if !tok.RevokedAt.IsZero() {
		tok.Hash = ""
		return tok, nil
	}
	tok, err = s.st.RevokeToken(ctx, id, s.cfg.Clock.Now(), s.audited(ctx, p, authz.TokenRevoke, "token/"+ids,
		map[string]string{"revoked": "no"}, map[string]string{"revoked": "yes"}))
	if err != nil {
		return store.Token{}, err
	}
	s.identityChanged()
	tok.Hash = ""
	return tok, nil
}

// TidyWebTokens deletes what signing in to the web pages left of p's
// user: the sign-in link p signed in with, so that a link signs in once,
// and the web sessions and sign-in links already revoked or expired. The
// web makes a session per sign-in; kept, they would pile up one per
// sign-in in the store and in token ls. The user's other tokens stay,
// revoked and expired ones too.
func (s *IdentityService) TidyWebTokens(ctx context.Context, p Principal) error {
	if p.Subject == "" || p.IsJob() {
		return nil
	}
	if err := s.authorize(ctx, p, authz.TokenRevoke, authz.Resource{Kind: "token", Owner: p.Subject}); err != nil {
		return err
	}
	toks, err := s.st.ListTokens(ctx, p.Subject)
	if err != nil {
		return err
	}
	now := s.cfg.Clock.Now()
	var ids []int64
	for _, t := range toks {
		web := t.Name == domain.WebSessionToken || t.Name == domain.SignInLinkToken
		expired := !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt)
		spent := !t.RevokedAt.IsZero() || expired
		if web && (spent || t.ID == p.TokenID && t.Name == domain.SignInLinkToken) {
			ids = append(ids, t.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	_, err = s.st.DeleteTokens(ctx, ids, s.audited(ctx, p, authz.TokenRevoke, "user/"+p.Subject,
		nil, map[string][]int64{"deleted": ids}))
	if err != nil {
		return err
	}
	s.identityChanged()
	return nil
}

// AttemptRef names one attempt of one job.
type AttemptRef struct {
	JobID   int64
	Attempt int
}

// IssueJobToken creates the token of one attempt and returns its secret
// (IssueJobTokens).
func (s *IdentityService) IssueJobToken(ctx context.Context, ref AttemptRef) (string, error) {
	secrets, err := s.IssueJobTokens(ctx, []AttemptRef{ref})
	if err != nil {
		return "", err
	}
	return secrets[0], nil
}

// IssueJobTokens creates the tokens of attempts that exist, in one write,
// and returns their secrets in the same order: the tokens of attempts the
// control loop reattaches to. Those of attempts it starts are stored with
// the starts (GrantJobTokens).
func (s *IdentityService) IssueJobTokens(ctx context.Context, refs []AttemptRef) ([]string, error) {
	secrets, grants, err := s.GrantJobTokens(ctx, refs)
	if err != nil || len(refs) == 0 {
		return nil, err
	}
	toks := make([]store.Token, len(grants))
	audit := make([]domain.AuditRecord, len(grants))
	for i, g := range grants {
		toks[i], audit[i] = g.Token, g.Audit
	}
	if err := s.st.CreateTokens(ctx, toks, audit...); err != nil {
		if len(refs) == 1 {
			return nil, fmt.Errorf("issue the token of attempt %s: %w", domain.AttemptRef(refs[0].JobID, refs[0].Attempt), err)
		}
		return nil, fmt.Errorf("issue the tokens of %d attempts: %w", len(refs), err)
	}
	return secrets, nil
}

// GrantJobTokens makes new tokens for attempts, without storing them: each
// one's secret, and the token and audit record the store change that
// creates the attempt stores with it (store.AttemptChange.Token), so that
// an attempt and its token are stored in one write. A token may only
// report for its own attempt (authz.AttemptReport with resource ID
// "<job>/<attempt>"); the control loop passes it to the attempt's process
// as TRAINYARD_JOB_TOKEN, and the change that ends the attempt deletes it
// (JobTokenEnd).
func (s *IdentityService) GrantJobTokens(ctx context.Context, refs []AttemptRef) ([]string, []store.TokenGrant, error) {
	secrets := make([]string, len(refs))
	grants := make([]store.TokenGrant, len(refs))
	now := s.cfg.Clock.Now()
	for i, ref := range refs {
		if ref.JobID <= 0 || ref.Attempt <= 0 {
			return nil, nil, fmt.Errorf("issue job token: attempt %d of job %d is not a valid attempt", ref.Attempt, ref.JobID)
		}
		secrets[i] = NewTokenSecret()
		at := domain.AttemptRef(ref.JobID, ref.Attempt)
		grants[i] = store.TokenGrant{
			Token: store.Token{Name: "job " + at, Subject: domain.JobTokenSubject(ref.JobID, ref.Attempt), Role: string(domain.RoleJob),
				Hash: HashToken(secrets[i]), CreatedAt: now},
			Audit: s.auditedAs(ctx, "system:control", authz.TokenCreate, "attempt/"+at, nil, tokenSummary{Name: "job " + at}),
		}
	}
	return secrets, grants, nil
}

// JobTokenEnd returns the audit record of the end of an attempt's token,
// which the store change that ends the attempt appends as it deletes the
// token (store.AttemptChange.EndTokens): a job token lives as long as its
// attempt, and the audit log records its issue and its end. Call
// JobTokensEnded once such changes are stored.
func (s *IdentityService) JobTokenEnd(ctx context.Context, ref AttemptRef) domain.AuditRecord {
	return s.auditedAs(ctx, "system:control", authz.TokenRevoke, "attempt/"+domain.AttemptRef(ref.JobID, ref.Attempt), nil, nil)
}

// JobTokensEnded forgets the cached authentications of attempts refs
// after their ends deleted their tokens (JobTokenEnd), here and on the
// other replicas, so that an ended attempt's token is refused from the
// next request on. Other cached authentications stay: an end changes no
// one else's rights.
func (s *IdentityService) JobTokensEnded(refs []AttemptRef) {
	s.jobAuth.forget(&s.auth, refs)
	if s.cfg.Broadcast != nil {
		s.cfg.Broadcast("jobauth")
	}
}

// Audit summaries (compact JSON, stable field names).
type (
	userSummary struct {
		Name string `json:"name"`
	}
	tokenSummary struct {
		Name      string    `json:"name"`
		User      string    `json:"user,omitempty"`
		ExpiresAt time.Time `json:"expires_at,omitzero"`
	}
	quotaSummary struct {
		GPUs        int     `json:"gpus"`
		CPUs        float64 `json:"cpus"`
		Memory      int64   `json:"memory"`
		Jobs        int     `json:"jobs"`
		BorrowGPUs  int     `json:"borrow_gpus"`
		BorrowCPUs  float64 `json:"borrow_cpus"`
		BorrowMem   int64   `json:"borrow_memory"`
		BorrowJobs  int     `json:"borrow_jobs"`
		MaxPriority string  `json:"max_priority,omitempty"`
	}
	poolSummary struct {
		Nodes      int     `json:"nodes"`
		GPUs       int     `json:"gpus"`
		CPUs       float64 `json:"cpus"`
		Memory     int64   `json:"memory"`
		MaxRunning int     `json:"max_running"`
		Borrowing  bool    `json:"borrowing"`
		Preemption bool    `json:"preemption"`
		// Rates, so a price change shows what it was and became.
		Rates domain.Rates `json:"rates,omitzero"`
		// IdleStop, so turning it on, off or retuning it is on record.
		IdleStop *idleStopSummary `json:"idle_stop,omitempty"`
	}
	idleStopSummary struct {
		Below float64 `json:"below"`
		For   string  `json:"for"`
	}
)

func quotaSum(q domain.Quota) quotaSummary {
	return quotaSummary{GPUs: q.Guaranteed.GPUs, CPUs: q.Guaranteed.CPUs, Memory: int64(q.Guaranteed.Memory), Jobs: q.Guaranteed.Jobs,
		BorrowGPUs: q.Borrow.GPUs, BorrowCPUs: q.Borrow.CPUs, BorrowMem: int64(q.Borrow.Memory), BorrowJobs: q.Borrow.Jobs, MaxPriority: string(q.MaxPriority)}
}

func poolSum(p domain.Pool) poolSummary {
	c := p.Capacity()
	sum := poolSummary{Nodes: len(p.Nodes), GPUs: c.GPUs, CPUs: c.CPUs, Memory: int64(c.Memory),
		MaxRunning: p.MaxRunning, Borrowing: p.Borrowing, Preemption: p.Preemption, Rates: p.Rates}
	if p.IdleStop.On() {
		sum.IdleStop = &idleStopSummary{Below: p.IdleStop.Below, For: p.IdleStop.For.String()}
	}
	return sum
}

// CheckRoute is the API's early check of a job token on a route: such a
// token may call only routes that report for an attempt, and those that
// read its job's checkpoints to resume from (attempt.resume); the
// concrete attempt is checked by the use case. action is the route's declared
// action ("" when it declares none). Other principals pass: the use case
// authorizes them against the resource.
func (s *IdentityService) CheckRoute(ctx context.Context, p Principal, action, route string) error {
	if a := authz.Action(action); !p.IsJob() || a == authz.AttemptReport || a == authz.AttemptResume {
		return nil
	}
	if action == "" {
		action = "route.call"
	}
	return s.authorize(ctx, p, authz.Action(action), authz.Resource{Kind: "route", ID: route})
}

// HashToken returns the stored form of a token secret.
func HashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// NewTokenSecret returns a fresh random token secret.
func NewTokenSecret() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("read random bytes: %v", err)) // the OS RNG does not fail
	}
	return "ty_" + hex.EncodeToString(b)
}
