package service

import (
	"context"
	"crypto/subtle"

	"trainyard/internal/authz"
)

// AuthorizeMetrics decides whether a caller who must show a token may read
// GET /metrics (docs/observability.md) with secret: the metrics token of the
// server config (metricsToken; "" for none), or the API token of a user who
// may read the audit log (admins and auditors), since the series name every
// project and pool. A token that is neither is handled as on every API
// route: audited as a failed authentication and counted against the
// client's address and the token's prefix (see Authenticate), and refused
// while either is over the limit; a valid token is never refused for
// others' failures. A user token without the role is an audited denial
// (domain.ErrForbidden).
func (s *IdentityService) AuthorizeMetrics(ctx context.Context, secret, metricsToken string) error {
	if metricsToken != "" && subtle.ConstantTimeCompare([]byte(secret), []byte(metricsToken)) == 1 {
		return nil
	}
	p, err := s.Authenticate(ctx, secret)
	if err != nil {
		return err
	}
	return s.authorize(ctx, p, authz.AuditRead, authz.Resource{Kind: "route", ID: "GET /metrics"})
}
