// Package api serves Trainyard's HTTP API under /api/v1, plus /healthz and
// /readyz. Handlers decode, call the service, and encode; errors map to status
// codes in one place (writeError). It never touches the store, the scheduler or
// executors directly. Handlers call the service of their aggregate
// (h.svc.Jobs, h.svc.Identity, …) and sit in that aggregate's file: jobs.go,
// identity.go, pools.go, artifacts.go, envs.go, templates.go, secrets.go,
// alerts.go, audit.go and the like; api.go holds the routes and the plumbing.
package api

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
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
	// Currency is the server-wide currency of pool rates, shown with them
	// ("": domain.DefaultCurrency).
	Currency string
	// Pages, when set, serves every path outside the API (the web pages
	// at /, package web); nil answers 404 there.
	Pages http.Handler
}

// currency is the server's currency of pool rates.
func (c Config) currency() string {
	if c.Currency == "" {
		return domain.DefaultCurrency
	}
	return c.Currency
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
	mux.Handle("POST /api/v1/jobs/preview", h.auth(h.preview))
	mux.Handle("GET /api/v1/jobs", h.auth(h.list))
	mux.Handle("GET /api/v1/jobs/{id}", h.auth(h.get))
	mux.Handle("POST /api/v1/jobs/{id}/cancel", h.auth(h.cancel))
	mux.Handle("POST /api/v1/jobs/{id}/hold", h.auth(h.hold))
	mux.Handle("POST /api/v1/jobs/{id}/release", h.auth(h.release))
	mux.Handle("POST /api/v1/jobs/{id}/priority", h.auth(h.setPriority)) // priority.go
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
	h.costRoutes(mux)     // spend reports: cost.go
	h.reportRoutes(mux)   // review reports: report.go
	h.budgetRoutes(mux)   // project budgets: budgets.go
	h.sweepRoutes(mux)    // sweeps and job arrays: sweeps.go
	h.compareRoutes(mux)  // jobs side by side: compare.go
	h.notifyRoutes(mux)   // users' default job-end notifications: notify.go
	if cfg.Pages != nil {
		mux.Handle("/", cfg.Pages)
	}
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusNotFound, "not_found", fmt.Sprintf("no API endpoint %s %s; see docs/api.md", r.Method, r.URL.Path), nil)
	})
	if cfg.Metrics != nil {
		return h.promObserve(h.recoverer(prettyJSON(h.uncleanUploads(mux))))
	}
	return h.recoverer(prettyJSON(h.uncleanUploads(mux)))
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
			if a, ok := jobTokenRoutes[r.Pattern]; ok {
				action = a
			}
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
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSpecBytes))
	if err != nil {
		return bodyError(err)
	}
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) == 0 || trimmed[0] != '{' {
		return decodeNonObject(body)
	}
	// An object, as nearly every body is: decode it into v in one pass,
	// then look past it. A syntax error in it is reported as is; any
	// other problem (a field v lacks, a wrong type) comes after what
	// follows the object, as decodeNonObject orders them.
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err = dec.Decode(v)
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) || errors.Is(err, io.ErrUnexpectedEOF) {
		return bodyError(err)
	}
	if err := afterObject(dec); err != nil {
		return bodyError(err)
	}
	if err != nil {
		return bodyError(err)
	}
	return nil
}

// afterObject checks that nothing but white space follows the value dec
// just decoded.
func afterObject(dec *json.Decoder) error {
	_, err := dec.Token()
	switch {
	case err == io.EOF:
		return nil
	case err == nil:
		return errors.New("more follows the JSON object; send exactly one object")
	}
	return err
}

// decodeNonObject says what is wrong with a body that does not start
// with an object: nothing, not JSON, or another kind of value.
func decodeNonObject(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	var raw json.RawMessage
	err := dec.Decode(&raw)
	if err == nil {
		err = afterObject(dec)
	}
	if err != nil {
		return bodyError(err)
	}
	return domain.FieldErrors{{Path: "body", Message: fmt.Sprintf("is %s, not a JSON object; send an object with this endpoint's fields (see docs/api.md)", jsonKind(raw))}}
}

// bodyError is the field error on body for err, a failure to read or
// decode it.
func bodyError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return domain.FieldErrors{{Path: "body", Message: fmt.Sprintf("is larger than %d bytes", maxSpecBytes)}}
	}
	return domain.FieldErrors{{Path: "body", Message: "is not valid JSON for this endpoint: " + err.Error()}}
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

// writeJSON answers status with v as JSON: compact, or indented when the
// request asked for it (?pretty=1, see prettyJSON).
func writeJSON(w http.ResponseWriter, status int, v any) {
	buf, ok := encodeJSON(w, v)
	if !ok {
		return
	}
	defer buf.free()
	sendJSON(w, status, buf.Bytes())
}

// writeJSONTagged answers 200 with v as writeJSON does, with a strong
// ETag of the answer's bytes; when the request's If-None-Match names that
// tag (the client holds these bytes already), it answers 304 with no body.
// The answer is computed in full either way, so a 304 is exactly as
// current as a 200.
func writeJSONTagged(w http.ResponseWriter, r *http.Request, v any) {
	buf, ok := encodeJSON(w, v)
	if !ok {
		return
	}
	defer buf.free()
	tag := buf.etag()
	w.Header()["Etag"] = []string{tag}
	if inm := r.Header.Get("If-None-Match"); inm != "" && etagMatches(inm, tag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	sendJSON(w, http.StatusOK, buf.Bytes())
}

// sendJSON writes encoded JSON with its length.
func sendJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	w.Write(body)
}

var jsonContentType = []string{"application/json"}

// jsonBuf is a response body being encoded; encodeJSON takes one from
// jsonBufs and free returns it.
type jsonBuf struct {
	bytes.Buffer
	enc, pretty *json.Encoder
}

var jsonBufs = sync.Pool{New: func() any {
	b := new(jsonBuf)
	b.enc = json.NewEncoder(&b.Buffer)
	b.pretty = json.NewEncoder(&b.Buffer)
	b.pretty.SetIndent("", "  ")
	return b
}}

// maxPooledJSON bounds the buffers kept for reuse: a rare huge answer
// does not pin its memory.
const maxPooledJSON = 1 << 20

func (b *jsonBuf) free() {
	if b.Cap() <= maxPooledJSON {
		b.Reset()
		jsonBufs.Put(b)
	}
}

// etag is a strong entity tag of the encoded bytes: their CRC-32 in two
// polynomials (64 bits in all, computed by the CPU's CRC instructions),
// the same on every replica and across restarts.
func (b *jsonBuf) etag() string {
	var sum [8]byte
	binary.BigEndian.PutUint32(sum[:4], crc32.ChecksumIEEE(b.Bytes()))
	binary.BigEndian.PutUint32(sum[4:], crc32.Checksum(b.Bytes(), castagnoli))
	var t [18]byte
	t[0], t[17] = '"', '"'
	hex.Encode(t[1:17], sum[:])
	return string(t[:])
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// etagMatches reports whether an If-None-Match header names tag: "*", or a
// list of tags one of which equals it ignoring a weak W/ prefix (RFC 9110
// 13.1.2 compares weakly).
func etagMatches(header, tag string) bool {
	for field := range strings.SplitSeq(header, ",") {
		field = strings.TrimSpace(field)
		if field == "*" || strings.TrimPrefix(field, "W/") == tag {
			return true
		}
	}
	return false
}

// encodeJSON encodes v into a pooled buffer, indented when w is a
// prettyWriter. A value that cannot be encoded (a NaN) is answered with
// a 500 here, and ok is false.
func encodeJSON(w http.ResponseWriter, v any) (buf *jsonBuf, ok bool) {
	buf = jsonBufs.Get().(*jsonBuf)
	enc := buf.enc
	if _, pretty := w.(*prettyWriter); pretty {
		enc = buf.pretty
	} else if b, ok := appendFast(buf.AvailableBuffer(), v); ok { // jobjson.go
		buf.Write(b)
		return buf, true
	}
	if err := enc.Encode(v); err != nil {
		buf.free()
		if _, isErr := v.(apitypes.Error); !isErr {
			writeErr(w, http.StatusInternalServerError, "internal", "internal error: the answer could not be encoded as JSON: "+err.Error(), nil)
		}
		return nil, false
	}
	return buf, true
}

// prettyJSON indents the JSON answers of requests that ask for it with
// the query parameter pretty (?pretty, or pretty=1, true or yes); every
// other request gets compact JSON.
func prettyJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.RawQuery, "pretty") {
			if v, ok := r.URL.Query()["pretty"]; ok && (v[0] == "" || truthy(v[0])) {
				w = &prettyWriter{w}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// prettyWriter marks a response whose JSON is indented.
type prettyWriter struct{ http.ResponseWriter }

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *prettyWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush passes flushes on, for streamed answers (logs --follow).
func (w *prettyWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

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
