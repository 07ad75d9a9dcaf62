package api

// The OpenAPI document is generated here, from apiRoutes (what each route
// takes and answers) and the apitypes structs (by reflection, so the
// schemas follow encoding/json exactly; descriptions come from their doc
// comments). TestOpenAPIDocument compares the result with openapi.json
// (embedded and served) and docs/openapi.json; -update rewrites both.

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	iofs "io/fs"
	"net/http"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

// apiParam is one query, header or path parameter.
type apiParam struct {
	name, typ, doc string // typ: string, integer or boolean
}

// apiRoute documents one route.
type apiRoute struct {
	id, summary string
	public      bool // no token (registered without h.auth)
	query       []apiParam
	headers     []apiParam
	body        any    // the request body's type, as a zero value; nil: none
	bodyOpt     bool   // the body may be left out
	bodyMedia   string // "" means application/json
	resp        any    // the success answer's type; nil: no body or a non-JSON one
	respMedia   string // "" means application/json when resp is set
	respDoc     string
	status      []int // success statuses; default 200
}

var (
	qProject = apiParam{"project", "string", "only this project"}
	qPool    = apiParam{"pool", "string", "only this pool"}
	qLimit   = apiParam{"limit", "integer", "at most this many"}
	hIdem    = apiParam{"Idempotency-Key", "string", "a repeated request with the same key returns the job the first created (200 instead of 201)"}
	hIdemSw  = apiParam{"Idempotency-Key", "string", "a repeated request with the same key returns the sweep the first created (200 instead of 201)"}
	hINM     = apiParam{"If-None-Match", "string", "the ETag of an earlier answer: 304 with no body while the answer is still the same"}
)

// qNotifyUser names whose default notification a notify route is about.
var qNotifyUser = apiParam{"user", "string", "another user's (admins only); default: the caller's"}

// apiRoutes describes every route the API registers, keyed by its ServeMux
// pattern. TestOpenAPICoversEveryRoute keeps it in step with the mux.
var apiRoutes = map[string]apiRoute{
	"GET /healthz": {id: "healthz", summary: "Liveness: the process answers.", public: true, respMedia: "text/plain"},
	"GET /readyz": {id: "readyz", summary: "Readiness: the store is reachable. With Accept: application/json, this replica's status.",
		public: true, resp: apitypes.Status{}, respMedia: "application/json,text/plain"},
	"GET /metrics": {id: "prometheusMetrics", summary: "Prometheus exposition (served when metrics are on). Who may read it is the server's metrics.auth: by default loopback clients without a token, others with the metrics token or an admin's or auditor's API token (docs/observability.md).",
		public: true, respMedia: "text/plain"},
	"GET /api/v1/openapi.json": {id: "openAPI", summary: "This document.", public: true, resp: map[string]any{}},

	"POST /api/v1/jobs": {id: "submitJob", summary: "Submit a job: a spec (object or spec file text) or a template. 201 with the new job, 200 when an Idempotency-Key matched an earlier submit.",
		headers: []apiParam{hIdem}, body: apitypes.SubmitRequest{}, resp: apitypes.Job{}, status: []int{201, 200}},
	"POST /api/v1/jobs/preview": {id: "previewSubmit", summary: "Run every check of a submit and answer what it would store and where the job would wait; nothing is stored (submit --dry-run).",
		body: apitypes.SubmitRequest{}, resp: apitypes.SubmitPreview{}},
	"GET /api/v1/jobs": {id: "listJobs", summary: "List jobs, newest first; next_cursor is set when more remain. Tagged with an ETag (see If-None-Match).", resp: apitypes.JobList{},
		query: []apiParam{{"state", "string", "comma-separated states"}, qProject, {"user", "string", "only jobs this user submitted"}, qPool,
			{"q", "string", "only jobs whose name contains this text (at most 200 characters; ASCII letters match in either case)"},
			qLimit, {"cursor", "string", "next_cursor of the previous page"}, {"sweep", "integer", "only the members of this sweep"}},
		headers: []apiParam{hINM}, status: []int{200, 304}},
	"POST /api/v1/sweeps": {id: "submitSweep", summary: "Submit a sweep (a spec with a sweep: section) or a job array (any spec with array): one sweep and its member jobs, stored at once. 201 with the sweep and its members' ids, 200 when an Idempotency-Key matched an earlier submit.",
		headers: []apiParam{hIdemSw}, body: apitypes.SweepRequest{}, resp: apitypes.Sweep{}, status: []int{201, 200}},
	"GET /api/v1/sweeps": {id: "listSweeps", summary: "List sweeps, newest first.", resp: apitypes.SweepList{}, query: []apiParam{qProject, qLimit}},
	"GET /api/v1/sweeps/{id}": {id: "getSweep", summary: "One sweep: its members counted by state, its state as its dependents see it, and its best member by its objective.",
		resp: apitypes.Sweep{}},
	"POST /api/v1/sweeps/{id}/cancel": {id: "cancelSweep", summary: "Cancel every member of the sweep that has not ended.",
		body: apitypes.CancelRequest{}, bodyOpt: true, resp: apitypes.Sweep{}},
	"GET /api/v1/jobs/{id}": {id: "getJob", summary: "One job with its spec snapshot, attempts and transitions. Tagged with an ETag (see If-None-Match).", resp: apitypes.Job{},
		headers: []apiParam{hINM}, status: []int{200, 304}},
	"POST /api/v1/jobs/{id}/cancel": {id: "cancelJob", summary: "Cancel a job.", body: apitypes.CancelRequest{}, bodyOpt: true, resp: apitypes.Job{}},
	"POST /api/v1/jobs/{id}/hold": {id: "holdJob", summary: "Keep a queued job out of scheduling until it is released.",
		body: apitypes.HoldRequest{}, bodyOpt: true, resp: apitypes.Job{}},
	"POST /api/v1/jobs/{id}/release": {id: "releaseJob", summary: "Put a held job back in the queue.", resp: apitypes.Job{}},
	"POST /api/v1/jobs/{id}/priority": {id: "setJobPriority", summary: "Change a waiting (queued or held) job's priority class, within its project's ceiling.",
		body: apitypes.PriorityRequest{}, resp: apitypes.Job{}},
	"POST /api/v1/jobs/{id}/rerun": {id: "rerunJob", summary: "Submit the job's spec snapshot again, with optional changes.",
		headers: []apiParam{hIdem}, body: apitypes.RerunRequest{}, bodyOpt: true, resp: apitypes.Job{}, status: []int{201, 200}},
	"GET /api/v1/jobs/{id}/logs": {id: "jobLogs", summary: "An attempt's log as text (X-Trainyard-Attempt names it); with follow, streamed until the attempt ends.",
		respMedia: "text/plain", query: []apiParam{{"attempt", "integer", "attempt number (default: the latest)"}, {"tail", "integer", "only the last N (filtered) lines"},
			{"follow", "boolean", "keep streaming until the attempt ends (true, 1 or yes)"}, {"timestamps", "boolean", "prefix lines with their time"},
			{"grep", "string", "only lines matching this RE2 expression"}, {"since", "string", "only lines after this: a duration before now (10m) or an RFC 3339 time"}}},
	"GET /api/v1/jobs/{id}/why": {id: "whyJob", summary: "Why the job is pending or failed, with evidence and a hint.", resp: apitypes.Why{}},
	"GET /api/v1/jobs/{id}/metrics": {id: "jobMetrics", summary: "The job's training metric series, downsampled.", resp: apitypes.MetricSeries{},
		query: []apiParam{{"key", "string", "only this metric"}, {"max", "integer", "about this many points per series (3-100000, default 500)"}}},
	"GET /api/v1/compare": {id: "compareJobs", summary: "2 to 20 jobs side by side: state, environment, code, run time, cost, metric summaries, and the spec fields that differ. Every job must be readable (one that is not answers 404, as a missing one).",
		resp: apitypes.Comparison{}, query: []apiParam{{"jobs", "string", "the job ids, separated by commas (12,13), or the parameter repeated"}}},
	"POST /api/v1/jobs/{id}/attempts/{n}/metrics": {id: "reportMetrics", summary: "Report training metrics for an attempt (its job token, or an admin); at most 10,000 points.",
		body: apitypes.MetricsReport{}, resp: apitypes.MetricsReportResult{}},
	"GET /api/v1/jobs/{id}/artifacts": {id: "jobArtifacts", summary: "The manifest of an attempt's outputs, with lineage.", resp: apitypes.Manifest{},
		query: []apiParam{{"attempt", "integer", "attempt number (default: the latest with outputs)"}}},
	"GET /api/v1/jobs/{id}/artifacts/{path...}": {id: "jobArtifact", summary: "One output file; supports range requests; X-Trainyard-SHA256 carries its checksum.",
		respMedia: "application/octet-stream"},
	"GET /api/v1/jobs/{id}/checkpoints": {id: "jobCheckpoints", summary: "The job's complete checkpoints (job.read, or the job token of its latest attempt while it runs).",
		resp: apitypes.CheckpointList{}},
	"GET /api/v1/jobs/{id}/checkpoints/{name}/archive": {id: "checkpointArchive", summary: "One checkpoint as a tar stream (job.read, or the job token of its latest attempt while it runs).",
		respMedia: "application/x-tar"},
	"POST /api/v1/jobs/{id}/attempts/{n}/resumed": {id: "reportResumed", summary: "Record which registered checkpoint the attempt resumed from, and why it skipped the ones before it (the attempt's job token, while the attempt is the latest and running): its lineage and its start message, as for an executor that hands the checkpoint over itself. 400 naming the field for a name that is not a registered checkpoint; 409 with code not_started before the server has recorded the attempt's start (report again), 409 once it has ended.",
		body: apitypes.ResumeReport{}, resp: apitypes.ResumeRecorded{}},
	"POST /api/v1/jobs/{id}/attempts/{n}/checkpoints": {id: "completeCheckpoint", summary: "Register a checkpoint the attempt marked complete (its job token).",
		body: apitypes.CheckpointComplete{}, resp: apitypes.Checkpoint{}},
	"PUT /api/v1/jobs/{id}/attempts/{n}/outputs/{path...}": {id: "putOutput", summary: "Write one file of the job's outputs (the attempt's job token, while the attempt is the latest and running): the body is its bytes, written at path below the output directory, replacing a file there in one step; 201 with its size and SHA-256. 400 for a path that is not clean and relative or leads through a link or a file, 409 once the attempt has ended, 413 over the per-file limit.",
		body: []byte{}, bodyMedia: "application/octet-stream", resp: apitypes.OutputUpload{}, status: []int{201}},
	"GET /api/v1/checkpoints/usage": {id: "checkpointUsage", summary: "Checkpoint space by job and project.", query: []apiParam{qProject}, resp: apitypes.CheckpointUsageList{}},
	"POST /api/v1/gc":               {id: "gc", summary: "Delete outputs and checkpoints past their retention (or list them with dry_run).", body: apitypes.GCRequest{}, resp: apitypes.GCReport{}},
	"GET /api/v1/version":           {id: "version", summary: "Server version and store kind.", resp: apitypes.Version{}},

	"HEAD /api/v1/code/{hash}": {id: "statCode", summary: "Whether the server has a code package (X-Trainyard-Code-Size gives its size)."},
	"PUT /api/v1/code/{hash}": {id: "putCode", summary: "Upload a code package (a tar.gz); 201 when new, 200 when the server had it.",
		body: []byte{}, bodyMedia: "application/octet-stream", resp: apitypes.CodePackage{}, status: []int{201, 200}},

	"GET /api/v1/alerts": {id: "listAlerts", summary: "Alerts, newest first.", resp: apitypes.AlertList{},
		query: []apiParam{{"state", "string", "firing or resolved"}, {"job", "integer", "only this job's"}, qLimit}},
	"POST /api/v1/alerts/{id}/ack": {id: "ackAlert", summary: "Acknowledge a firing alert: listed as acknowledged, not notified again (409 when resolved or already acknowledged).",
		body: apitypes.AlertAck{}, resp: apitypes.Alert{}},
	"POST /api/v1/alerts/test": {id: "testAlert", summary: "Send a test notification to a channel: 204 when it accepted it, 502 with its error when not.",
		body: apitypes.AlertTest{}, status: []int{204}},

	"GET /api/v1/pools":        {id: "listPools", summary: "Pools with their nodes, rules and capacity.", resp: apitypes.PoolList{}},
	"GET /api/v1/pools/{name}": {id: "getPool", summary: "One pool.", resp: apitypes.Pool{}},
	"PUT /api/v1/pools/{name}": {id: "putPool", summary: "Create (201) or replace (200) a pool.", body: apitypes.Pool{}, resp: apitypes.Pool{}, status: []int{201, 200}},
	"GET /api/v1/quotas":       {id: "listQuotas", summary: "Quotas.", query: []apiParam{qProject, qPool}, resp: apitypes.QuotaList{}},
	"PUT /api/v1/quotas/{project}/{pool}": {id: "putQuota", summary: "Create or replace a project's quota in a pool.",
		body: apitypes.Quota{}, resp: apitypes.Quota{}},
	"DELETE /api/v1/quotas/{project}/{pool}": {id: "deleteQuota", summary: "Remove a quota.", status: []int{204}},
	"GET /api/v1/projects":                   {id: "listProjects", summary: "Projects and their fair-share weights.", resp: apitypes.ProjectList{}},
	"PUT /api/v1/projects/{name}":            {id: "putProject", summary: "Create or update a project.", body: apitypes.Project{}, resp: apitypes.Project{}},
	"GET /api/v1/queue": {id: "queue", summary: "Waiting jobs in scheduling order, with position, reason and estimated start.",
		query: []apiParam{qPool}, resp: apitypes.Queue{}},
	"POST /api/v1/quota-requests": {id: "createQuotaRequest", summary: "File a compute request.", body: apitypes.QuotaRequest{}, resp: apitypes.QuotaRequest{}, status: []int{201}},
	"GET /api/v1/quota-requests": {id: "listQuotaRequests", summary: "Compute requests and grants, newest first.",
		query: []apiParam{qProject, qPool}, resp: apitypes.QuotaRequestList{}},
	"POST /api/v1/quota-requests/{id}/approve": {id: "approveQuotaRequest", summary: "Approve a compute request.", body: apitypes.Decision{}, bodyOpt: true, resp: apitypes.QuotaRequest{}},
	"POST /api/v1/quota-requests/{id}/deny":    {id: "denyQuotaRequest", summary: "Deny a compute request.", body: apitypes.Decision{}, bodyOpt: true, resp: apitypes.QuotaRequest{}},

	"GET /api/v1/whoami": {id: "whoami", summary: "Who the token acts as, with roles.", resp: apitypes.Whoami{}},
	"GET /api/v1/users":  {id: "listUsers", summary: "Users with their roles.", resp: apitypes.UserList{}},
	"POST /api/v1/users": {id: "createUser", summary: "Create a user.", body: struct {
		Name string `json:"name"`
	}{}, resp: apitypes.User{}, status: []int{201}},
	"POST /api/v1/users/{name}/roles": {id: "grantRole", summary: "Grant a role: 201 when granted, 200 when the user held it.",
		body: apitypes.RoleBinding{}, resp: apitypes.RoleChange{}, status: []int{201, 200}},
	"DELETE /api/v1/users/{name}/roles": {id: "revokeRole", summary: "Revoke a role.", resp: apitypes.RoleChange{},
		query: []apiParam{{"role", "string", "the role"}, {"project", "string", "its project (project roles)"}}},
	"GET /api/v1/tokens": {id: "listTokens", summary: "API tokens (never their secrets).", resp: apitypes.TokenList{},
		query: []apiParam{{"user", "string", "this user's (default: the caller's)"}, {"all", "boolean", "every user's (admins)"}}},
	"POST /api/v1/tokens": {id: "createToken", summary: "Create a token; the secret is in this answer only.",
		body: apitypes.TokenRequest{}, bodyOpt: true, resp: apitypes.Token{}, status: []int{201}},
	"DELETE /api/v1/tokens/{id}": {id: "revokeToken", summary: "Revoke a token.", resp: apitypes.Token{}},

	"GET /api/v1/secrets": {id: "listSecrets", summary: "Secrets (never their values).", query: []apiParam{qProject}, resp: apitypes.SecretList{}},
	"PUT /api/v1/secrets/{name}": {id: "putSecret", summary: "Store a secret's next version: 201 when new, 200 for a new version.",
		query: []apiParam{{"project", "string", "the project's secret (default: a global one)"}}, body: apitypes.SecretValue{}, resp: apitypes.Secret{}, status: []int{201, 200}},
	"DELETE /api/v1/secrets/{name}": {id: "deleteSecret", summary: "Delete a secret, every version.",
		query: []apiParam{{"project", "string", "the project's secret (default: a global one)"}}, status: []int{204}},
	"POST /api/v1/secrets/rotate-key": {id: "rotateSecretKey", summary: "Re-seal every secret with a new master key.", body: apitypes.RotateKeyRequest{}, resp: apitypes.RotateKeyResult{}},

	"GET /api/v1/audit": {id: "listAudit", summary: "Audit records in log order; next_after when more match.", resp: apitypes.AuditList{},
		query: []apiParam{{"actor", "string", "only this actor's"}, {"action", "string", "only this action"}, {"target", "string", "only this target"},
			{"since", "string", "only records at or after this RFC 3339 time"}, {"after", "integer", "only records after this sequence number"}, qLimit}},
	"GET /api/v1/audit/verify":  {id: "verifyAudit", summary: "Verify the audit log's hash chain (and the server's witness).", resp: apitypes.AuditVerification{}},
	"POST /api/v1/audit/verify": {id: "verifyAuditWithWitness", summary: "Verify the audit log against a witness the caller kept.", body: apitypes.AuditVerifyRequest{}, resp: apitypes.AuditVerification{}},
	"GET /api/v1/audit/witness": {id: "auditWitness", summary: "The server's witness file, to keep elsewhere.", resp: map[string]any{}},
	"GET /api/v1/audit/export": {id: "exportAudit", summary: "Every record as one AuditRecord JSON object per line, streamed.",
		query: []apiParam{{"after", "integer", "only records after this sequence number"}}, resp: apitypes.AuditRecord{}, respMedia: "application/x-ndjson"},

	"GET /api/v1/cost": {id: "costReport", summary: "Spend of attempts over a window, by group, priced at the pools' rates; running attempts count up to now.",
		resp: apitypes.CostReport{}, query: []apiParam{{"project", "string", "only this project (default: every project the caller has a role in)"},
			{"since", "string", "start of the window: a duration back from now (30d, 12h) or a time (2026-03-01, RFC 3339); default 30d"},
			{"by", "string", "group by project (default), pool, user, job or day (UTC)"}}},
	"GET /api/v1/report": {id: "reviewReport", summary: "Review of a window by project or pool: queue-time percentiles, attempts by outcome and reason, held and used hours against capacity, spend and waste against budget, and the jobs far from what they asked for.",
		resp: apitypes.Report{}, query: []apiParam{{"project", "string", "only this project (default: every project the caller has a role in)"},
			{"since", "string", "start of the window: a duration back from now (7d, 12h) or a time (2026-03-01, RFC 3339); default 7d"},
			{"by", "string", "group by project (default) or pool"}}},
	"GET /api/v1/budgets": {id: "listBudgets", summary: "Project budgets with each one's spend in its period that holds now (committed: plus what running attempts may cost until their timeouts).",
		resp: apitypes.BudgetList{}, query: []apiParam{{"project", "string", "only this project's (default: every project the caller may read the spend of)"}}},
	"PUT /api/v1/budgets/{project}": {id: "putBudget", summary: "Create or replace a project's budget: amount, and period month or start and end; answers it with its spend.",
		body: apitypes.Budget{}, resp: apitypes.Budget{}},
	"DELETE /api/v1/budgets/{project}": {id: "deleteBudget", summary: "Remove a project's budget; jobs it held are released.", status: []int{204}},
	"GET /api/v1/notify": {id: "getNotify", summary: "A user's default job-end notification (404: none), which applies to their jobs whose spec has no notify section.",
		query: []apiParam{qNotifyUser}, resp: apitypes.NotifyPref{}},
	"PUT /api/v1/notify": {id: "putNotify", summary: "Set or replace a user's default job-end notification: end states, channel names and e-mail addresses.",
		query: []apiParam{qNotifyUser}, body: apitypes.NotifyPref{}, resp: apitypes.NotifyPref{}},
	"DELETE /api/v1/notify": {id: "deleteNotify", summary: "Clear a user's default job-end notification.", query: []apiParam{qNotifyUser}, status: []int{204}},

	"POST /api/v1/templates": {id: "createTemplate", summary: "Add a template version: 201 when new, 200 when the body equals the latest version.",
		body: apitypes.CreateTemplate{}, resp: apitypes.Template{}, status: []int{201, 200}},
	"GET /api/v1/templates": {id: "listTemplates", summary: "Templates (latest versions, without bodies).", query: []apiParam{qProject}, resp: apitypes.TemplateList{}},
	"GET /api/v1/templates/{name}": {id: "getTemplate", summary: "One template version with its body.", resp: apitypes.Template{},
		query: []apiParam{qProject, {"version", "integer", "this version (default: the latest)"}}},

	"POST /api/v1/envs": {id: "registerEnv", summary: "Register an environment version: 201 when new, 200 when a stored version has the same definition.",
		body: apitypes.RegisterEnv{}, resp: apitypes.Env{}, status: []int{201, 200}},
	"GET /api/v1/envs":                  {id: "listEnvs", summary: "Every environment version.", resp: apitypes.EnvList{}},
	"GET /api/v1/envs/{name}":           {id: "listEnvVersions", summary: "One environment's versions.", resp: apitypes.EnvList{}},
	"GET /api/v1/envs/{name}/{version}": {id: "getEnv", summary: "One environment version.", resp: apitypes.Env{}},
	"POST /api/v1/envs/{name}/{version}/deprecate": {id: "deprecateEnv", summary: "Deprecate a version (or \"all\").",
		body: apitypes.DeprecateEnv{}, bodyOpt: true, resp: apitypes.EnvList{}},
}

// pathParams describes path parameters by name.
var pathParams = map[string]apiParam{
	"id":      {typ: "integer", doc: "a job, request or token id"},
	"n":       {typ: "integer", doc: "an attempt number, from 1"},
	"path":    {typ: "string", doc: "a file's path inside the outputs (may contain /)"},
	"name":    {typ: "string", doc: "a name"},
	"project": {typ: "string", doc: "a project"},
	"pool":    {typ: "string", doc: "a pool"},
	"hash":    {typ: "string", doc: `the package's hash, "sha256:<64 hex digits>"`},
	"version": {typ: "string", doc: `a version number from 1 (deprecate also takes "all")`},
}

var pathParamRE = regexp.MustCompile(`\{([a-z]+)(\.\.\.)?\}`)

// openAPIPath turns a ServeMux pattern's path into an OpenAPI path and its
// parameter names: {path...} becomes {path}.
func openAPIPath(p string) (string, []string) {
	var names []string
	for _, m := range pathParamRE.FindAllStringSubmatch(p, -1) {
		names = append(names, m[1])
	}
	return pathParamRE.ReplaceAllString(p, "{$1}"), names
}

// generateOpenAPI builds the document; docs holds the apitypes doc
// comments ("Type" and "Type.Field").
func generateOpenAPI(t testing.TB, docs map[string]string) []byte {
	g := &schemaGen{schemas: map[string]any{}, docs: docs, request: map[reflect.Type]bool{}}
	for _, rt := range apiRoutes {
		if rt.body != nil {
			g.markRequest(reflect.TypeOf(rt.body))
		}
	}
	paths := map[string]map[string]any{}
	for pattern, rt := range apiRoutes {
		method, p, ok := strings.Cut(pattern, " ")
		if !ok {
			t.Fatalf("route %q: no method", pattern)
		}
		path, names := openAPIPath(p)
		op := map[string]any{"operationId": rt.id, "summary": rt.summary, "tags": []string{tag(path)}}
		var params []any
		for _, n := range names {
			pp, ok := pathParams[n]
			if !ok {
				t.Fatalf("route %q: path parameter %q has no entry in pathParams", pattern, n)
			}
			params = append(params, map[string]any{"name": n, "in": "path", "required": true, "description": pp.doc, "schema": map[string]any{"type": pp.typ}})
		}
		for _, q := range rt.query {
			params = append(params, map[string]any{"name": q.name, "in": "query", "description": q.doc, "schema": map[string]any{"type": q.typ}})
		}
		for _, hd := range rt.headers {
			params = append(params, map[string]any{"name": hd.name, "in": "header", "description": hd.doc, "schema": map[string]any{"type": hd.typ}})
		}
		if params != nil {
			op["parameters"] = params
		}
		if rt.body != nil {
			media := rt.bodyMedia
			if media == "" {
				media = "application/json"
			}
			var schema any = map[string]any{"type": "string", "format": "binary"}
			if media == "application/json" {
				schema = g.schema(reflect.TypeOf(rt.body))
			}
			op["requestBody"] = map[string]any{"required": !rt.bodyOpt, "content": map[string]any{media: map[string]any{"schema": schema}}}
		}
		status := rt.status
		if status == nil {
			status = []int{http.StatusOK}
		}
		resps := map[string]any{"default": map[string]any{"$ref": "#/components/responses/Error"}}
		for _, code := range status {
			r := map[string]any{"description": http.StatusText(code)}
			if code != http.StatusNoContent && code != http.StatusNotModified && (rt.resp != nil || rt.respMedia != "") {
				content := map[string]any{}
				media := rt.respMedia
				if media == "" {
					media = "application/json"
				}
				for _, m := range strings.Split(media, ",") {
					switch {
					case rt.resp != nil && (m == "application/json" || m == "application/x-ndjson"):
						content[m] = map[string]any{"schema": g.schema(reflect.TypeOf(rt.resp))}
					case m == "application/octet-stream" || m == "application/x-tar":
						content[m] = map[string]any{"schema": map[string]any{"type": "string", "format": "binary"}}
					default:
						content[m] = map[string]any{"schema": map[string]any{"type": "string"}}
					}
				}
				r["content"] = content
			}
			resps[itoa(code)] = r
		}
		op["responses"] = resps
		if rt.public {
			op["security"] = []any{}
		}
		if paths[path] == nil {
			paths[path] = map[string]any{}
		}
		paths[path][strings.ToLower(method)] = op
	}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{
			"title":   "Trainyard API",
			"version": "v1",
			"description": "The HTTP API of a Trainyard server (docs/api.md). Every /api/v1 endpoint but this document needs " +
				"Authorization: Bearer <token>. Request bodies are exactly one JSON object with the endpoint's fields; unknown " +
				"fields are refused. Answers are compact JSON; add the query parameter pretty=1 for indented JSON. In schemas " +
				"of answers, required lists the fields always present; schemas that are also " +
				"request bodies list none, since the endpoint's own rules say which it needs, and refuse unknown fields " +
				"(additionalProperties: false); answers may gain fields in later versions. Generated from the server's route " +
				"table and internal/api/apitypes; do not edit by hand.",
		},
		"security": []any{map[string]any{"bearer": []any{}}},
		"paths":    paths,
		"components": map[string]any{
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer",
				"description": "An API token (trainyard token create; the server prints the first admin's token on first start) or, on the routes an attempt reports to, that attempt's job token."}},
			"responses": map[string]any{"Error": map[string]any{
				"description": "Any non-2xx answer. error.code is stable: invalid_spec, invalid_request (400), unauthorized (401), forbidden (403), not_found (404), conflict (409), too_large (413), rate_limited (429), internal (500), not_implemented (501), delivery_failed (502), store_unavailable (503, with Retry-After).",
				"content":     map[string]any{"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(apitypes.Error{}))}},
			}},
			"schemas": g.schemas,
		},
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// tag groups operations by the path's first segment under /api/v1.
func tag(path string) string {
	rest, ok := strings.CutPrefix(path, "/api/v1/")
	if !ok {
		return "server"
	}
	first, _, _ := strings.Cut(rest, "/")
	return strings.TrimSuffix(first, ".json")
}

type schemaGen struct {
	schemas map[string]any
	docs    map[string]string
	request map[reflect.Type]bool // types that are (part of) a request body
}

var (
	timeType = reflect.TypeOf(time.Time{})
	rawType  = reflect.TypeOf(json.RawMessage{})
)

func (g *schemaGen) markRequest(t reflect.Type) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		if t == rawType {
			return
		}
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == timeType || g.request[t] {
		return
	}
	g.request[t] = true
	for i := 0; i < t.NumField(); i++ {
		g.markRequest(t.Field(i).Type)
	}
}

// schema returns the schema of t: a $ref for a named apitypes struct
// (added to the components), inline otherwise.
func (g *schemaGen) schema(t reflect.Type) map[string]any {
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t == rawType:
		return map[string]any{"description": "any JSON value"}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return g.schema(t.Elem())
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int32:
		return map[string]any{"type": "integer"}
	case reflect.Int64:
		return map[string]any{"type": "integer", "format": "int64"}
	case reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return map[string]any{"type": "string", "format": "binary"}
		}
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		if t.Elem().Kind() == reflect.Interface {
			return map[string]any{"type": "object"}
		}
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.Struct:
		if t.Name() == "" {
			return g.object(t)
		}
		if _, ok := g.schemas[t.Name()]; !ok {
			g.schemas[t.Name()] = nil // placeholder: breaks cycles
			g.schemas[t.Name()] = g.object(t)
		}
		return map[string]any{"$ref": "#/components/schemas/" + t.Name()}
	}
	panic("openapi: no schema for " + t.String())
}

// object is the schema of a struct's JSON object, as encoding/json writes it.
func (g *schemaGen) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, omitted := jsonField(f.Name, string(f.Tag))
		if omitted || !f.IsExported() {
			continue
		}
		s := g.schema(f.Type)
		optional := strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")
		if f.Type.Kind() == reflect.Pointer && !optional { // nil is written as null
			if typ, ok := s["type"].(string); ok {
				s["type"] = []string{typ, "null"}
			} else {
				s = map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}
			}
		}
		if d := g.docs[t.Name()+"."+f.Name]; d != "" && t.Name() != "" {
			s["description"] = d
		}
		props[name] = s
		if !optional {
			required = append(required, name)
		}
	}
	out := map[string]any{"type": "object", "properties": props}
	if g.request[t] { // the server refuses unknown fields; answers may gain fields
		out["additionalProperties"] = false
	}
	if d := g.docs[t.Name()]; d != "" && t.Name() != "" {
		out["description"] = d
	}
	if len(required) > 0 && !g.request[t] {
		sort.Strings(required)
		out["required"] = required
	}
	return out
}

// jsonField reads a struct field's json tag: its name, its options, and
// whether encoding/json leaves the field out.
func jsonField(field, tag string) (name, opts string, omitted bool) {
	v := reflect.StructTag(tag).Get("json")
	if v == "-" {
		return "", "", true
	}
	name, opts, _ = strings.Cut(v, ",")
	if name == "" {
		name = field
	}
	return name, opts, false
}

// apitypesDocs reads the apitypes sources: the doc comment of every type
// and field, and every exported struct with its JSON field names.
func apitypesDocs(t testing.TB) (docs map[string]string, structs map[string][]string) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, "apitypes", func(fi iofs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	docs, structs = map[string]string{}, map[string][]string{}
	for _, pkg := range pkgs {
		for _, file := range pkg.Files {
			for _, decl := range file.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.TYPE {
					continue
				}
				for _, spec := range gd.Specs {
					ts := spec.(*ast.TypeSpec)
					doc := ts.Doc
					if doc == nil && len(gd.Specs) == 1 {
						doc = gd.Doc
					}
					docs[ts.Name.Name] = commentText(doc, nil)
					st, ok := ts.Type.(*ast.StructType)
					if !ok || !ts.Name.IsExported() {
						continue
					}
					names := []string{}
					for _, f := range st.Fields.List {
						tag := ""
						if f.Tag != nil {
							tag = strings.Trim(f.Tag.Value, "`")
						}
						for _, n := range f.Names {
							docs[ts.Name.Name+"."+n.Name] = commentText(f.Doc, f.Comment)
							if name, _, omitted := jsonField(n.Name, tag); !omitted && n.IsExported() {
								names = append(names, name)
							}
						}
					}
					structs[ts.Name.Name] = names
				}
			}
		}
	}
	return docs, structs
}

// commentText joins doc comments into one paragraph-preserving string.
func commentText(groups ...*ast.CommentGroup) string {
	var parts []string
	for _, g := range groups {
		if s := strings.TrimSpace(g.Text()); s != "" {
			parts = append(parts, s)
		}
	}
	s := strings.Join(parts, " ")
	paras := strings.Split(s, "\n\n")
	for i, p := range paras {
		paras[i] = strings.Join(strings.Fields(p), " ")
	}
	return strings.Join(paras, "\n\n")
}
