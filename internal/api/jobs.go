package api

import (
	"cmp"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

func (h *handler) submit(w http.ResponseWriter, r *http.Request, p service.Principal) {
	h.submitOrPreview(w, r, p, false)
}

// preview answers POST /api/v1/jobs/preview: a submit's checks and what it
// would store, with nothing stored (submit --dry-run).
func (h *handler) preview(w http.ResponseWriter, r *http.Request, p service.Principal) {
	h.submitOrPreview(w, r, p, true)
}

// specDoc is the spec document of a request's "spec": the text of a
// spec file sent as a JSON string, or the spec object itself; nil when
// it is absent or null.
func specDoc(raw json.RawMessage) ([]byte, error) {
	doc := []byte(raw)
	if len(doc) > 0 && doc[0] == '"' {
		var text string
		if err := json.Unmarshal(doc, &text); err != nil {
			return nil, domain.FieldErrors{{Path: "spec", Message: "must be a spec object or a string holding the spec document"}}
		}
		doc = []byte(text)
	}
	if string(doc) == "null" {
		return nil, nil
	}
	return doc, nil
}

func (h *handler) submitOrPreview(w http.ResponseWriter, r *http.Request, p service.Principal, preview bool) {
	var req apitypes.SubmitRequest
	if err := decodeBody(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	doc, err := specDoc(req.Spec)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if len(doc) == 0 && req.Template == "" {
		h.writeError(w, r, domain.FieldErrors{{Path: "spec", Message: "is required: send the job spec as an object or as the text of a spec file"}})
		return
	}
	in := service.SubmitInput{Doc: doc, Set: req.Set, IdempotencyKey: r.Header.Get("Idempotency-Key"),
		Template: req.Template, Project: req.Project, Vars: req.Vars, Code: codeRef(req.Code), // Code: code.go
		AllowDuplicate: req.AllowDuplicate}
	if preview {
		h.writePreview(w, r, p, in)
		return
	}
	res, err := h.svc.Jobs.Submission(r.Context(), p, in)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.writeSubmitted(w, res.Job, res.Created, res.Warnings...)
}

// writePreview previews the submit in.
func (h *handler) writePreview(w http.ResponseWriter, r *http.Request, p service.Principal, in service.SubmitInput) {
	pv, err := h.svc.Jobs.Preview(r.Context(), p, in)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	res := pv.Spec.Resources
	out := apitypes.SubmitPreview{DryRun: true, Name: pv.Spec.Name, Project: pv.Spec.Project, Pool: pv.Spec.Pool,
		Priority: string(pv.Spec.Policy.Priority), SpecHash: pv.SpecHash, Spec: pv.SpecJSON,
		Resources: apitypes.Resources{GPUs: res.GPUs, CPUs: res.CPUs, Memory: res.Memory.String(), Nodes: res.Nodes}}
	if t := pv.Spec.Policy.Timeout; t > 0 {
		out.Timeout = t.String()
	}
	out.Currency = h.cfg.currency()
	if pv.CostBounded {
		out.WorstCaseCost = pv.WorstCase.String()
	}
	if b := pv.Budget; b != nil {
		u := b.Status.Use
		out.Budget = &apitypes.PreviewBudget{Amount: b.Status.Budget.Amount.String(), Period: u.Period,
			Action: string(b.Status.Budget.Action), Spent: u.Spent.String(), Committed: u.Committed.String(),
			CommittedUnbounded: u.Unbounded, Fits: b.Fits, Message: b.Why}
	}
	if pv.QueueKnown {
		out.Queue = &apitypes.PreviewQueue{Waiting: pv.Waiting, Ahead: pv.Ahead}
		if !pv.AheadStart.IsZero() {
			at := pv.AheadStart.UTC()
			out.Queue.AheadStart = &at
		}
	}
	writeJSON(w, http.StatusOK, out)
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
	o.User, o.Pool, o.Name = q.Get("user"), q.Get("pool"), q.Get("q")
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
	if v := q.Get("sweep"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			errs.Add("sweep", "must be a sweep id (a positive number), got %q", v)
		}
		o.Sweep = n
	}
	if err := errs.Err(); err != nil {
		h.writeError(w, r, err)
		return
	}
	if rows := cmp.Or(o.Limit, service.DefaultListLimit) + 1; rows > 0 && rows <= maxPooledPage {
		page := listPages.Get().(*[]domain.Job)
		if cap(*page) < rows {
			*page = make([]domain.Job, 0, rows)
		}
		o.Into = *page
		defer listPages.Put(page) // the answer is written and nothing keeps the jobs
	}
	jobs, more, err := h.svc.Jobs.List(r.Context(), p, o)
	if err != nil {
		h.writeError(w, r, listParamErr(err))
		return
	}
	costs, err := h.svc.Jobs.Costs(r.Context(), jobs)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	answer := jobPage{jobs: jobs, dto: func(j *domain.Job, i int) apitypes.Job {
		out := pageJobDTO(j)
		if i < len(costs) && costs[i].Priced {
			out.Cost, out.Currency = costs[i].Cost.String(), h.cfg.currency()
		}
		return out
	}}
	if more {
		answer.cursor = strconv.FormatInt(jobs[len(jobs)-1].ID, 10)
	}
	writeJSONTagged(w, r, answer)
}

// listPages holds the pages list answers lend the store to decode jobs
// into (a page of 51 Jobs is 40 KiB, which the allocator would otherwise
// clear for every list): the store decodes only list rows into them,
// which set every field they carry, so a page needs no clearing between
// answers (store.JobFilter.Into).
var listPages = sync.Pool{New: func() any { return new([]domain.Job) }}

// maxPooledPage bounds the pages kept in listPages, in rows: a rare large
// list does not pin its memory.
const maxPooledPage = 201

// listParamErr names the list's invalid fields as its query parameters:
// the name search is q.
func listParamErr(err error) error {
	var fe domain.FieldErrors
	if !errors.As(err, &fe) {
		return err
	}
	out := slices.Clone(fe)
	for i := range out {
		if out[i].Path == "name" {
			out[i].Path = "q"
		}
	}
	return out
}

func (h *handler) get(w http.ResponseWriter, r *http.Request, p service.Principal) {
	id, err := pathID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	d, err := h.svc.Jobs.Show(r.Context(), p, id)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := detailDTO(d)
	if d.Priced {
		out.Cost, out.CostPerHour, out.Currency = d.Cost.String(), d.CostPerHour.String(), h.cfg.currency()
	}
	if z := d.Sizing; z != nil {
		out.Sizing = &apitypes.Sizing{HeldSeconds: z.Held.Seconds(), CPUs: z.CPUs, UsedCPUs: z.UsedCPUs, GPUs: z.GPUs, UsedGPUs: z.UsedGPUs,
			Memory: int64(z.Memory), PeakMemory: int64(z.PeakMemory), Oversized: z.Oversized, NearMemory: z.NearMemory}
		if d.Priced {
			out.Sizing.IdleCost = z.IdleCost.String()
		}
	}
	writeJSONTagged(w, r, out)
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
	writeJSON(w, http.StatusOK, jobDTO(&job))
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

// writeSubmitted answers a submit or re-run: 201 with the new job (counted
// in the metrics), or 200 with the one an idempotent repeat found.
func (h *handler) writeSubmitted(w http.ResponseWriter, job domain.Job, created bool, warnings ...string) {
	out := jobDTO(&job)
	out.Created, out.Warnings = &created, warnings
	status := http.StatusCreated
	if !created {
		status = http.StatusOK
	} else if h.cfg.Metrics != nil {
		h.cfg.Metrics.JobSubmitted(job.Project, job.Pool)
	}
	w.Header().Set("Location", "/api/v1/jobs/"+strconv.FormatInt(job.ID, 10))
	writeJSON(w, status, out)
}
