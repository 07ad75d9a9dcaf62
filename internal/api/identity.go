package api

import (
	"errors"
	"math"
	"net"
	"net/http"
	"strconv"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// routeActions declares, for every authenticated route, the authorization
// action it performs ("" for routes any caller may use: whoami, version).
// The service authorizes the action against the concrete resource; the
// middleware uses this table to refuse job tokens everywhere but the
// routes that report for an attempt. A route missing here is closed to job
// tokens.
var routeActions = map[string]string{
	"POST /api/v1/sweeps":                              "job.submit",
	"GET /api/v1/sweeps":                               "job.read",
	"GET /api/v1/sweeps/{id}":                          "job.read",
	"POST /api/v1/sweeps/{id}/cancel":                  "job.cancel",
	"GET /api/v1/cost":                                 "cost.read",
	"GET /api/v1/report":                               "cost.read",
	"GET /api/v1/budgets":                              "cost.read",
	"PUT /api/v1/budgets/{project}":                    "budget.write",
	"DELETE /api/v1/budgets/{project}":                 "budget.write",
	"GET /api/v1/notify":                               "notify.write",
	"PUT /api/v1/notify":                               "notify.write",
	"DELETE /api/v1/notify":                            "notify.write",
	"POST /api/v1/jobs":                                "job.submit",
	"POST /api/v1/jobs/preview":                        "job.submit",
	"HEAD /api/v1/code/{hash}":                         "job.submit",
	"PUT /api/v1/code/{hash}":                          "job.submit",
	"GET /api/v1/alerts":                               "job.read",
	"GET /api/v1/jobs/{id}/artifacts":                  "job.read",
	"GET /api/v1/jobs/{id}/artifacts/{path...}":        "job.read",
	"GET /api/v1/jobs/{id}/checkpoints":                "job.read",
	"GET /api/v1/jobs/{id}/checkpoints/{name}/archive": "job.read",
	"POST /api/v1/jobs/{id}/attempts/{n}/checkpoints":  "attempt.report",
	"POST /api/v1/gc":                                  "artifact.gc",
	"GET /api/v1/checkpoints/usage":                    "job.read",
	"POST /api/v1/alerts/test":                         "alert.test",
	"POST /api/v1/alerts/{id}/ack":                     "job.cancel", // whoever may cancel the alert's job
	"GET /api/v1/jobs":                                 "job.read",
	"GET /api/v1/jobs/{id}":                            "job.read",
	"POST /api/v1/jobs/{id}/cancel":                    "job.cancel",
	"POST /api/v1/jobs/{id}/hold":                      "job.hold",
	"POST /api/v1/jobs/{id}/release":                   "job.hold",
	"POST /api/v1/jobs/{id}/priority":                  "job.priority",
	"POST /api/v1/jobs/{id}/rerun":                     "job.submit",
	"GET /api/v1/jobs/{id}/logs":                       "job.read",
	"GET /api/v1/jobs/{id}/why":                        "job.read",
	"GET /api/v1/jobs/{id}/metrics":                    "job.read",
	"GET /api/v1/compare":                              "job.read",
	"POST /api/v1/jobs/{id}/attempts/{n}/metrics":      "attempt.report",
	"GET /api/v1/version":                              "",
	"GET /api/v1/whoami":                               "",
	"GET /api/v1/pools":                                "pool.read",
	"GET /api/v1/pools/{name}":                         "pool.read",
	"PUT /api/v1/pools/{name}":                         "pool.write",
	"GET /api/v1/quotas":                               "quota.read",
	"PUT /api/v1/quotas/{project}/{pool}":              "quota.write",
	"DELETE /api/v1/quotas/{project}/{pool}":           "quota.write",
	"GET /api/v1/projects":                             "project.read",
	"PUT /api/v1/projects/{name}":                      "project.write",
	"GET /api/v1/queue":                                "queue.read",
	"GET /api/v1/users":                                "user.read",
	"POST /api/v1/users":                               "user.write",
	"POST /api/v1/users/{name}/roles":                  "role.write",
	"DELETE /api/v1/users/{name}/roles":                "role.write",
	"GET /api/v1/tokens":                               "token.read",
	"POST /api/v1/tokens":                              "token.create",
	"DELETE /api/v1/tokens/{id}":                       "token.revoke",
	"POST /api/v1/quota-requests":                      "quota.request",
	"GET /api/v1/quota-requests":                       "quota.read",
	"POST /api/v1/quota-requests/{id}/approve":         "quota.approve",
	"POST /api/v1/quota-requests/{id}/deny":            "quota.approve",
	"GET /api/v1/secrets":                              "secret.read",
	"PUT /api/v1/secrets/{name}":                       "secret.write",
	"DELETE /api/v1/secrets/{name}":                    "secret.write",
	"POST /api/v1/secrets/rotate-key":                  "secret.rotate",
	"GET /api/v1/audit":                                "audit.read",
	"GET /api/v1/audit/verify":                         "audit.read",
	"POST /api/v1/audit/verify":                        "audit.read",
	"GET /api/v1/audit/witness":                        "audit.read",
	"GET /api/v1/audit/export":                         "audit.read",
	"POST /api/v1/templates":                           "template.write",
	"GET /api/v1/templates":                            "template.read",
	"GET /api/v1/templates/{name}":                     "template.read",
	"POST /api/v1/envs":                                "env.write",
	"GET /api/v1/envs":                                 "env.read",
	"GET /api/v1/envs/{name}":                          "env.read",
	"GET /api/v1/envs/{name}/{version}":                "env.read",
	"POST /api/v1/envs/{name}/{version}/deprecate":     "env.write",
	// The uploads of a job's agent (outputs and checkpoints).
	"PUT /api/v1/jobs/{id}/attempts/{n}/outputs/{path...}": "attempt.report",
	"POST /api/v1/jobs/{id}/attempts/{n}/resumed":          "attempt.report",
}

// jobTokenRoutes are the routes a job token may call for another action
// than the one the route declares for users: reading its own job's
// checkpoints to resume from (attempt.resume; the use case checks the job
// and the attempt).
var jobTokenRoutes = map[string]string{
	"GET /api/v1/jobs/{id}/checkpoints":                "attempt.resume",
	"GET /api/v1/jobs/{id}/checkpoints/{name}/archive": "attempt.resume",
}

// identityRoutes registers whoami and the user, role and token endpoints.
func (h *handler) identityRoutes(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/whoami", h.auth(h.whoami))
	mux.Handle("GET /api/v1/users", h.auth(h.listUsers))
	mux.Handle("POST /api/v1/users", h.auth(h.createUser))
	mux.Handle("POST /api/v1/users/{name}/roles", h.auth(h.grantRole))
	mux.Handle("DELETE /api/v1/users/{name}/roles", h.auth(h.revokeRole))
	mux.Handle("GET /api/v1/tokens", h.auth(h.listTokens))
	mux.Handle("POST /api/v1/tokens", h.auth(h.createToken))
	mux.Handle("DELETE /api/v1/tokens/{id}", h.auth(h.revokeToken))
}

// clientAddr is the request's client address, host only.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// writeRateLimited answers 429 with Retry-After in whole seconds.
func writeRateLimited(w http.ResponseWriter, e *service.RateLimitedError) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(e.RetryAfter.Seconds())))))
	writeErr(w, http.StatusTooManyRequests, "rate_limited", e.Error(), nil)
}

// isRateLimited reports whether err is a *service.RateLimitedError.
func isRateLimited(err error) (*service.RateLimitedError, bool) {
	var rl *service.RateLimitedError
	ok := errors.As(err, &rl)
	return rl, ok
}

func bindingsDTO(bs []domain.RoleBinding) []apitypes.RoleBinding {
	out := make([]apitypes.RoleBinding, len(bs))
	for i, b := range bs {
		out[i] = apitypes.RoleBinding{Role: string(b.Role), Project: b.Project}
	}
	return out
}

func userDTO(u domain.User) apitypes.User {
	return apitypes.User{Name: u.Name, Roles: bindingsDTO(u.Roles), CreatedAt: u.CreatedAt}
}

func tokenDTO(t service.Token) apitypes.Token {
	return apitypes.Token{ID: t.ID, Name: t.Name, User: t.Subject, CreatedAt: t.CreatedAt,
		ExpiresAt: timePtr(t.ExpiresAt), RevokedAt: timePtr(t.RevokedAt)}
}

func (h *handler) whoami(w http.ResponseWriter, r *http.Request, p service.Principal) {
	id, err := h.svc.Identity.Whoami(r.Context(), p)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.Whoami{User: p.Subject, Roles: []apitypes.RoleBinding{}, TokenID: p.TokenID,
		TokenName: id.Token.Name, ExpiresAt: timePtr(id.Token.ExpiresAt), Job: p.JobID, Attempt: p.Attempt}
	for _, g := range p.Roles {
		out.Roles = append(out.Roles, apitypes.RoleBinding{Role: string(g)})
	}
	if len(p.Roles) == 0 && p.Role != "" {
		out.Roles = append(out.Roles, apitypes.RoleBinding{Role: string(p.Role)})
	}
	for _, pr := range p.Projects {
		out.Roles = append(out.Roles, apitypes.RoleBinding{Role: string(pr.Role), Project: pr.Project})
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) listUsers(w http.ResponseWriter, r *http.Request, p service.Principal) {
	users, err := h.svc.Identity.ListUsers(r.Context(), p)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.UserList{Users: make([]apitypes.User, len(users))}
	for i, u := range users {
		out.Users[i] = userDTO(u)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) createUser(w http.ResponseWriter, r *http.Request, p service.Principal) {
	var req struct {
		Name string `json:"name"`
	}
	if err := decodeBody(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	u, err := h.svc.Identity.CreateUser(r.Context(), p, req.Name)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/api/v1/users/"+u.Name)
	writeJSON(w, http.StatusCreated, userDTO(u))
}

func (h *handler) grantRole(w http.ResponseWriter, r *http.Request, p service.Principal) {
	var req apitypes.RoleBinding
	if err := decodeBody(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	user := r.PathValue("name")
	created, err := h.svc.Identity.GrantRole(r.Context(), p, user, domain.RoleBinding{Role: domain.Role(req.Role), Project: req.Project})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, apitypes.RoleChange{User: user, Role: req, Changed: created})
}

// revokeRole takes ?role=R[&project=P].
func (h *handler) revokeRole(w http.ResponseWriter, r *http.Request, p service.Principal) {
	q := r.URL.Query()
	b := apitypes.RoleBinding{Role: q.Get("role"), Project: q.Get("project")}
	user := r.PathValue("name")
	if err := h.svc.Identity.RevokeRole(r.Context(), p, user, domain.RoleBinding{Role: domain.Role(b.Role), Project: b.Project}); err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apitypes.RoleChange{User: user, Role: b, Changed: true})
}

// listTokens takes ?user=U or ?all=true; without either, the caller's own.
func (h *handler) listTokens(w http.ResponseWriter, r *http.Request, p service.Principal) {
	q := r.URL.Query()
	toks, err := h.svc.Identity.ListTokens(r.Context(), p, q.Get("user"), truthy(q.Get("all")))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.TokenList{Tokens: make([]apitypes.Token, len(toks))}
	for i, t := range toks {
		out.Tokens[i] = tokenDTO(t)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) createToken(w http.ResponseWriter, r *http.Request, p service.Principal) {
	var req apitypes.TokenRequest
	if r.ContentLength != 0 {
		if err := decodeBody(w, r, &req); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	ttl, err := domain.ParseTTL(req.Expires)
	if err != nil {
		h.writeError(w, r, domain.FieldErrors{{Path: "expires", Message: err.Error()}})
		return
	}
	secret, tok, err := h.svc.Identity.CreateToken(r.Context(), p, service.TokenInput{User: req.User, Name: req.Name, TTL: ttl})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := tokenDTO(tok)
	out.Token = secret
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, out)
}

func (h *handler) revokeToken(w http.ResponseWriter, r *http.Request, p service.Principal) {
	v := r.PathValue("id")
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id <= 0 {
		h.writeError(w, r, domain.FieldErrors{{Path: "id", Message: strconv.Quote(v) + " is not a token id; ids are positive whole numbers"}})
		return
	}
	tok, err := h.svc.Identity.RevokeToken(r.Context(), p, id)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, tokenDTO(tok))
}
