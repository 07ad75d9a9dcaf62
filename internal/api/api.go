// Package api serves Trainyard's HTTP API under /api/v1, plus /healthz and
// /readyz. Handlers decode, call the service, and encode; errors map to status
// codes in one place (writeError). It never touches the store, the scheduler or
// executors directly.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// maxSpecBytes bounds a submit request body.
const maxSpecBytes = 1 << 20

// Config wires the API.
type Config struct {
	Service *service.Service
	Logger  *slog.Logger
	Version apitypes.Version
	// Ready reports whether the server can take work (store reachable).
	Ready func(ctx context.Context) error
	// Status describes this replica and which replica leads (nil: a single
	// server, which leads itself).
	Status func(ctx context.Context) apitypes.Status
	// Metrics, when set, serves GET /metrics and observes every request
	// and every created job (docs/observability.md).
	Metrics Metrics
	// MetricsAuth says who may read GET /metrics; "" means
	// MetricsAuthToken when MetricsToken is set, else MetricsAuthLoopback.
	MetricsAuth MetricsAuth
	// MetricsToken is a bearer token GET /metrics accepts besides the API
	// tokens of admins and auditors ("" for none).
	MetricsToken string
	// PoolHardware compares a pool's nodes with the hardware that runs its
	// jobs: what they declare beyond it ("" when they fit) and whether the
	// server config marks that as simulated. Nil: pools are not compared.
	PoolHardware func(domain.Pool) (beyond string, simulated bool)
}

// MetricsAuth says who may read GET /metrics (docs/observability.md).
type MetricsAuth string

const (
	// MetricsAuthLoopback serves clients on this machine (127.0.0.0/8,
	// ::1) without a token and requires one from every other client.
	MetricsAuthLoopback MetricsAuth = "loopback"
	// MetricsAuthToken requires a token from every client.
	MetricsAuthToken MetricsAuth = "token"
	// MetricsAuthNone serves everyone without a token: anyone who can
	// reach the server learns every project's and pool's name and load.
	MetricsAuthNone MetricsAuth = "none"
)

// Metrics is the Prometheus exposition and the hooks the API feeds it.
type Metrics interface {
	http.Handler // serves GET /metrics
	// ObserveRequest records a finished request by its route pattern (""
	// when no route matched), status code and duration.
	ObserveRequest(route string, code int, took time.Duration)
	// JobSubmitted counts a job created by a submit request.
	JobSubmitted(project, pool string)
}

// Handler returns the API's http.Handler.
func Handler(cfg Config) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Ready == nil {
		cfg.Ready = func(context.Context) error { return nil }
	}
	h := &handler{cfg: cfg, svc: cfg.Service, log: cfg.Logger}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", h.readyz)
	// The OpenAPI document needs no token; see openapi.go.
	mux.HandleFunc("GET /api/v1/openapi.json", openAPI)
	if cfg.Metrics != nil { // metrics: behind MetricsAuth (prometheus.go)
		mux.HandleFunc("GET /metrics", h.promMetrics)
	}
	mux.Handle("POST /api/v1/jobs", h.auth(h.submit))
	mux.Handle("GET /api/v1/jobs", h.auth(h.list))
	mux.Handle("GET /api/v1/jobs/{id}", h.auth(h.get))
	mux.Handle("POST /api/v1/jobs/{id}/cancel", h.auth(h.cancel))
	mux.Handle("POST /api/v1/jobs/{id}/hold", h.auth(h.hold))
	mux.Handle("POST /api/v1/jobs/{id}/release", h.auth(h.release))
	mux.Handle("GET /api/v1/jobs/{id}/logs", h.auth(h.logs))
	mux.Handle("GET /api/v1/jobs/{id}/why", h.auth(h.why))
	mux.Handle("GET /api/v1/version", h.auth(h.version))
	h.poolRoutes(mux)     // pools, quotas, projects and the queue: pools.go
	h.requestRoutes(mux)  // compute requests: requests.go
	h.identityRoutes(mux) // whoami, users, roles, tokens: identity.go
	h.secretRoutes(mux)   // secrets: secrets.go
	h.auditRoutes(mux)    // the audit log: audit.go
	h.trainingRoutes(mux) // training metrics: training.go
	h.alertRoutes(mux)    // alerts: alerts.go
	h.artifactRoutes(mux) // outputs and checkpoints: artifacts.go
	h.codeRoutes(mux)     // code packages: code.go
	h.templateRoutes(mux) // job templates: templates.go
	h.envRoutes(mux)      // software environments: envs.go
	h.rerunRoutes(mux)    // re-runs: rerun.go
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusNotFound, "not_found", fmt.Sprintf("no API endpoint %s %s; see docs/api.md", r.Method, r.URL.Path), nil)
	})
	if cfg.Metrics != nil {
		return h.promObserve(h.recoverer(mux))
	}
	return h.recoverer(mux)
}

type handler struct {
	cfg Config
	svc *service.Service
	log *slog.Logger
}

type ctxKey struct{}

type authedFunc func(w http.ResponseWriter, r *http.Request, p service.Principal)

// auth authenticates the caller, records the client address for audit
// records and rate limiting, and refuses job tokens on routes that are not
// theirs (see routeActions); the service authorizes everything else against
// the concrete resource.
func (h *handler) auth(next authedFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(service.WithClient(r.Context(), clientAddr(r)))
		secret, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		p, err := h.svc.Identity.Authenticate(r.Context(), strings.TrimSpace(secret))
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		if p.IsJob() {
			action, declared := routeActions[r.Pattern]
			if !declared || action != "" {
				if err := h.svc.Identity.CheckRoute(r.Context(), p, action, r.Pattern); err != nil {
					h.writeError(w, r, err)
					return
				}
			}
		}
		next(w, r, p)
	})
}

// recoverer turns a handler panic into a 500 with a JSON body instead of a
// dropped connection, and logs the stack.
func (h *handler) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				h.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
				writeErr(w, http.StatusInternalServerError, "internal", "internal error; the server log has the details", nil)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

func (h *handler) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := h.cfg.Ready(ctx); err != nil {
		// The same answer as an API call during an outage (unavailable.go),
		// with the cause for the operator who probes it.
		code := "unavailable"
		if isStoreUnavailable(err) {
			code = "store_unavailable"
		}
		setRetryAfter(w, storeRetryAfter)
		writeErr(w, http.StatusServiceUnavailable, code, "not ready: "+err.Error(), nil)
		return
	}
	if h.cfg.Status == nil {
		io.WriteString(w, "ok\n")
		return
	}
	st := h.cfg.Status(ctx)
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		writeJSON(w, http.StatusOK, st)
		return
	}
	leader := "none (an election is under way)"
	if st.Leader != "" {
		leader = fmt.Sprintf("%s (term %d)", st.Leader, st.Epoch)
	}
	fmt.Fprintf(w, "ok\nreplica: %s\nleader: %s\n", st.Replica, leader)
}

func (h *handler) version(w http.ResponseWriter, r *http.Request, p service.Principal) {
	writeJSON(w, http.StatusOK, h.cfg.Version)
}

func (h *handler) submit(w http.ResponseWriter, r *http.Request, p service.Principal) {
	var req apitypes.SubmitRequest
	if err := decodeBody(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	doc := []byte(req.Spec)
	if len(doc) > 0 && doc[0] == '"' {
		var text string
		if err := json.Unmarshal(doc, &text); err != nil {
			h.writeError(w, r, domain.FieldErrors{{Path: "spec", Message: "must be a spec object or a string holding the spec document"}})
			return
		}
		doc = []byte(text)
	}
	if string(doc) == "null" {
		doc = nil
	}
	if len(doc) == 0 && req.Template == "" {
		h.writeError(w, r, domain.FieldErrors{{Path: "spec", Message: "is required: send the job spec as an object or as the text of a spec file"}})
		return
	}
	job, created, err := h.svc.Jobs.Submit(r.Context(), p, service.SubmitInput{Doc: doc, Set: req.Set, IdempotencyKey: r.Header.Get("Idempotency-Key"),
		Template: req.Template, Project: req.Project, Vars: req.Vars, Code: codeRef(req.Code)}) // Code: code.go
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := jobDTO(job)
	out.Created = &created
	status := http.StatusCreated
	if !created {
		status = http.StatusOK
	} else if h.cfg.Metrics != nil {
		h.cfg.Metrics.JobSubmitted(job.Project, job.Pool)
	}
	w.Header().Set("Location", fmt.Sprintf("/api/v1/jobs/%d", job.ID))
	writeJSON(w, status, out)
}

func (h *handler) list(w http.ResponseWriter, r *http.Request, p service.Principal) {
	q := r.URL.Query()
	var o service.ListOptions
	var errs domain.FieldErrors
	for _, v := range q["state"] {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				o.States = append(o.States, domain.JobState(s))
			}
		}
	}
	o.Project = q.Get("project")
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			errs.Add("limit", "must be a whole number, got %q", v)
		}
		o.Limit = n
	}
	if v := q.Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			errs.Add("cursor", "is not a cursor from a previous page: %q", v)
		}
		o.BeforeID = n
	}
	if err := errs.Err(); err != nil {
		h.writeError(w, r, err)
		return
	}
	jobs, more, err := h.svc.Jobs.List(r.Context(), p, o)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.JobList{Jobs: make([]apitypes.Job, len(jobs))}
	for i, j := range jobs {
		out.Jobs[i] = jobDTO(j)
	}
	if more {
		out.NextCursor = strconv.FormatInt(jobs[len(jobs)-1].ID, 10)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) get(w http.ResponseWriter, r *http.Request, p service.Principal) {
	id, err := pathID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	d, err := h.svc.Jobs.Get(r.Context(), p, id)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, detailDTO(d))
}

func (h *handler) cancel(w http.ResponseWriter, r *http.Request, p service.Principal) {
	id, err := pathID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var req apitypes.CancelRequest
	if r.ContentLength != 0 {
		if err := decodeBody(w, r, &req); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	job, err := h.svc.Jobs.Cancel(r.Context(), p, id, req.Reason)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, jobDTO(job))
}

func (h *handler) logs(w http.ResponseWriter, r *http.Request, p service.Principal) {
	id, err := pathID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	var req service.LogRequest
	var errs domain.FieldErrors
	if v := q.Get("attempt"); v != "" {
		if req.Attempt, err = strconv.Atoi(v); err != nil || req.Attempt < 1 {
			errs.Add("attempt", "must be an attempt number (1 or more), got %q", v)
		}
	}
	if v := q.Get("tail"); v != "" {
		if req.Tail, err = strconv.Atoi(v); err != nil || req.Tail < 0 {
			errs.Add("tail", "must be a number of lines (0 or more), got %q", v)
		}
	}
	req.Follow = truthy(q.Get("follow"))
	req.Timestamps = truthy(q.Get("timestamps"))
	req.Grep, req.Since = q.Get("grep"), q.Get("since") // validated by the service
	if err := errs.Err(); err != nil {
		h.writeError(w, r, err)
		return
	}
	stream, err := h.svc.Jobs.OpenLogs(r.Context(), p, id, req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Trainyard-Attempt", strconv.Itoa(stream.Attempt()))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	flusher, _ := w.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	if err := stream.Copy(r.Context(), w, flush); err != nil && r.Context().Err() == nil {
		h.log.Warn("copy log", "job", id, "err", err)
	}
}

func (h *handler) why(w http.ResponseWriter, r *http.Request, p service.Principal) {
	id, err := pathID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	why, err := h.svc.Jobs.Explain(r.Context(), p, id)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	msg := why.Job.Message
	if why.Summary != "" {
		msg = why.Summary // the diagnosis; the exit message is among the evidence
	}
	writeJSON(w, http.StatusOK, apitypes.Why{ID: why.Job.ID, State: string(why.Job.State), Reason: string(why.Job.Reason),
		Message: msg, Evidence: why.Evidence, Hint: why.Hint, Class: string(why.Class)})
}

func truthy(v string) bool { return v == "1" || v == "true" || v == "yes" }

func pathID(r *http.Request) (int64, error) {
	v := r.PathValue("id")
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id <= 0 {
		return 0, domain.FieldErrors{{Path: "id", Message: fmt.Sprintf("%q is not a job id; ids are positive whole numbers", v)}}
	}
	return id, nil
}

// decodeBody decodes the request's JSON body into v, which must be a
// pointer to a struct. A body that is not one JSON object is refused: null
// would decode to the zero value (a PUT of null would zero what it
// replaces), and anything after the object would be silently ignored.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSpecBytes))
	var raw json.RawMessage
	err := dec.Decode(&raw)
	if err == nil {
		if _, err = dec.Token(); err == io.EOF {
			err = nil
		} else if err == nil {
			err = errors.New("more follows the JSON object; send exactly one object")
		}
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return domain.FieldErrors{{Path: "body", Message: fmt.Sprintf("is larger than %d bytes", maxSpecBytes)}}
		}
		return domain.FieldErrors{{Path: "body", Message: "is not valid JSON for this endpoint: " + err.Error()}}
	}
	if raw[0] != '{' {
		return domain.FieldErrors{{Path: "body", Message: fmt.Sprintf("is %s, not a JSON object; send an object with this endpoint's fields (see docs/api.md)", jsonKind(raw))}}
	}
	dec = json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return domain.FieldErrors{{Path: "body", Message: "is not valid JSON for this endpoint: " + err.Error()}}
	}
	return nil
}

// jsonKind names the kind of a JSON value, for messages: "null", "an array".
func jsonKind(raw json.RawMessage) string {
	switch raw[0] {
	case 'n':
		return "null"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	}
	return "a number"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, msg string, fields []apitypes.FieldError) {
	writeJSON(w, status, apitypes.Error{Error: apitypes.ErrorBody{Code: code, Message: msg, Fields: fields}})
}

// writeError maps an error to its status in one place. Only messages built
// for users reach the client; anything unexpected is logged and hidden.
func (h *handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var fe domain.FieldErrors
	if rl, ok := isRateLimited(err); ok {
		writeRateLimited(w, rl)
		return
	}
	switch {
	case isStoreUnavailable(err):
		h.writeStoreUnavailable(w, r, err) // unavailable.go
	case errors.As(err, &fe):
		fields := make([]apitypes.FieldError, len(fe))
		for i, f := range fe {
			fields[i] = apitypes.FieldError{Path: f.Path, Message: f.Message, Line: f.Line}
		}
		code, msg := "invalid_request", "the request is invalid"
		if r.Method == http.MethodPost && r.URL.Path == "/api/v1/jobs" {
			code, msg = "invalid_spec", fmt.Sprintf("the job spec has %d problem(s); fix them and submit again", len(fe))
		}
		writeErr(w, http.StatusBadRequest, code, msg, fields)
	case errors.Is(err, domain.ErrUnauthorized):
		w.Header().Set("WWW-Authenticate", `Bearer realm="trainyard"`)
		writeErr(w, http.StatusUnauthorized, "unauthorized", err.Error(), nil)
	case errors.Is(err, domain.ErrForbidden):
		writeErr(w, http.StatusForbidden, "forbidden", err.Error(), nil)
	case errors.Is(err, domain.ErrNotFound):
		writeErr(w, http.StatusNotFound, "not_found", err.Error(), nil)
	case errors.Is(err, domain.ErrConflict):
		writeErr(w, http.StatusConflict, "conflict", err.Error(), nil)
	case errors.Is(err, domain.ErrInvalid):
		writeErr(w, http.StatusBadRequest, "invalid_request", err.Error(), nil)
	case errors.Is(err, service.ErrDelivery):
		writeErr(w, http.StatusBadGateway, "delivery_failed", "the alert channel did not accept the notification: "+strings.TrimPrefix(err.Error(), service.ErrDelivery.Error()+"\n"), nil)
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads the answer.
	default:
		h.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeErr(w, http.StatusInternalServerError, "internal", "internal error; the server log has the details", nil)
	}
}
