package api

import (
	"context"
	"fmt"
	"net/http"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// poolRoutes registers the pool, quota, project and queue endpoints.
func (h *handler) poolRoutes(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/pools", h.auth(h.listPools))
	mux.Handle("GET /api/v1/pools/{name}", h.auth(h.getPool))
	mux.Handle("PUT /api/v1/pools/{name}", h.auth(h.putPool))
	mux.Handle("GET /api/v1/quotas", h.auth(h.listQuotas))
	mux.Handle("PUT /api/v1/quotas/{project}/{pool}", h.auth(h.putQuota))
	mux.Handle("DELETE /api/v1/quotas/{project}/{pool}", h.auth(h.deleteQuota))
	mux.Handle("GET /api/v1/projects", h.auth(h.listProjects))
	mux.Handle("PUT /api/v1/projects/{name}", h.auth(h.putProject))
	mux.Handle("GET /api/v1/queue", h.auth(h.queue))
}

func (h *handler) listPools(w http.ResponseWriter, r *http.Request, p service.Principal) {
	pools, err := h.svc.Pools.ListPools(r.Context(), p)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.PoolList{Pools: make([]apitypes.Pool, len(pools))}
	for i, pl := range pools {
		out.Pools[i] = h.poolDTO(r.Context(), pl)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) getPool(w http.ResponseWriter, r *http.Request, p service.Principal) {
	pool, err := h.svc.Pools.GetPool(r.Context(), p, r.PathValue("name"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, h.poolDTO(r.Context(), pool))
}

func (h *handler) putPool(w http.ResponseWriter, r *http.Request, p service.Principal) {
	name := r.PathValue("name")
	var req apitypes.Pool
	if err := decodeBody(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	if err := checkPathName("name", req.Name, name); err != nil {
		h.writeError(w, r, err)
		return
	}
	req.Name = name
	if c := req.Rates.Currency; c != "" && c != h.cfg.currency() {
		h.writeError(w, r, domain.FieldErrors{{Path: "rates.currency", Message: fmt.Sprintf(
			"rates are in the server's currency, %s, not %q; leave currency out, or change the server config's currency", h.cfg.currency(), c)}})
		return
	}
	pool, err := PoolFromDTO(req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	stored, created, err := h.svc.Pools.PutPool(r.Context(), p, pool)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	w.Header().Set("Location", "/api/v1/pools/"+stored.Name)
	writeJSON(w, status, h.poolDTO(r.Context(), stored))
}

func (h *handler) listQuotas(w http.ResponseWriter, r *http.Request, p service.Principal) {
	q := r.URL.Query()
	quotas, err := h.svc.Pools.ListQuotas(r.Context(), p, q.Get("project"), q.Get("pool"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.QuotaList{Quotas: make([]apitypes.Quota, len(quotas))}
	for i, qt := range quotas {
		out.Quotas[i] = quotaDTO(qt)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) putQuota(w http.ResponseWriter, r *http.Request, p service.Principal) {
	project, pool := r.PathValue("project"), r.PathValue("pool")
	var req apitypes.Quota
	if err := decodeBody(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	var errs domain.FieldErrors
	if err := checkPathName("project", req.Project, project); err != nil {
		errs = append(errs, err...)
	}
	if err := checkPathName("pool", req.Pool, pool); err != nil {
		errs = append(errs, err...)
	}
	if len(errs) > 0 {
		h.writeError(w, r, errs)
		return
	}
	req.Project, req.Pool = project, pool
	q, err := QuotaFromDTO(req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	stored, err := h.svc.Pools.SetQuota(r.Context(), p, q)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, quotaDTO(stored))
}

func (h *handler) deleteQuota(w http.ResponseWriter, r *http.Request, p service.Principal) {
	if err := h.svc.Pools.DeleteQuota(r.Context(), p, r.PathValue("project"), r.PathValue("pool")); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) listProjects(w http.ResponseWriter, r *http.Request, p service.Principal) {
	projects, err := h.svc.Pools.ListProjects(r.Context(), p)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.ProjectList{Projects: make([]apitypes.Project, len(projects))}
	for i, pr := range projects {
		out.Projects[i] = apitypes.Project{Name: pr.Name, Shares: pr.Shares, CreatedAt: pr.CreatedAt}
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) putProject(w http.ResponseWriter, r *http.Request, p service.Principal) {
	name := r.PathValue("name")
	var req apitypes.Project
	if err := decodeBody(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	if err := checkPathName("name", req.Name, name); err != nil {
		h.writeError(w, r, err)
		return
	}
	pr, err := h.svc.Pools.SetProject(r.Context(), p, domain.Project{Name: name, Shares: req.Shares})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apitypes.Project{Name: pr.Name, Shares: pr.Shares, CreatedAt: pr.CreatedAt})
}

func (h *handler) queue(w http.ResponseWriter, r *http.Request, p service.Principal) {
	entries, err := h.svc.Pools.Queue(r.Context(), p, r.URL.Query().Get("pool"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.Queue{Entries: make([]apitypes.QueueEntry, len(entries))}
	for i, e := range entries {
		out.Entries[i] = apitypes.QueueEntry{ID: e.JobID, Name: e.Name, Project: e.Project, Pool: e.Pool,
			Priority: string(e.Priority), Position: e.Position, Reason: string(e.Reason), Message: e.Message,
			SubmittedAt: e.Submitted, EstimatedStart: timePtr(e.EstimatedStart)}
	}
	writeJSON(w, http.StatusOK, out)
}

// checkPathName rejects a body that names a different object than the path;
// an empty body name takes the path's.
func checkPathName(field, inBody, inPath string) domain.FieldErrors {
	if inBody == "" || inBody == inPath {
		return nil
	}
	return domain.FieldErrors{{Path: field, Message: fmt.Sprintf("is %q but the URL names %q; leave it out or make them match", inBody, inPath)}}
}

// poolDTO is the wire form of p, compared with this machine's hardware.
func (h *handler) poolDTO(ctx context.Context, p domain.Pool) apitypes.Pool {
	out := poolDTO(p)
	out.Rates.Currency = h.cfg.currency()
	out.Open, _ = h.svc.Pools.PoolOpen(ctx, p.Name) // the pool was just read: a failure here only hides the mark
	if h.cfg.PoolHardware != nil {
		out.BeyondHardware, out.Simulated = h.cfg.PoolHardware(p)
	}
	return out
}

func poolDTO(p domain.Pool) apitypes.Pool {
	c := p.Capacity()
	out := apitypes.Pool{
		Name: p.Name, Executor: p.Executor, GPUType: p.GPUType, Nodes: make([]apitypes.Node, len(p.Nodes)),
		MaxGPUsPerJob: p.MaxGPUsPerJob, MaxNodesPerJob: p.MaxNodesPerJob, MaxRunning: p.MaxRunning,
		Borrowing: p.Borrowing, Preemption: p.Preemption,
		Capacity:  apitypes.PoolCapacity{GPUs: c.GPUs, CPUs: c.CPUs, Memory: c.Memory.String()},
		CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
	}
	if p.MaxTimeout > 0 {
		out.MaxTimeout = p.MaxTimeout.String()
	}
	if p.LogLimit > 0 {
		out.LogLimit = p.LogLimit.String()
	}
	out.Rates = ratesDTO(p.Rates)
	if p.IdleStop.On() {
		out.IdleStop = &apitypes.PoolIdleStop{Below: p.IdleStop.Below, For: p.IdleStop.For.String()}
	}
	for i, n := range p.Nodes {
		gpus := n.GPUs
		if gpus == nil {
			gpus = []int{}
		}
		out.Nodes[i] = apitypes.Node{Name: n.Name, CPUs: n.CPUs, Memory: n.Memory.String(), GPUs: gpus}
	}
	for _, pr := range p.Priorities {
		out.Priorities = append(out.Priorities, string(pr))
	}
	return out
}

// PoolFromDTO converts the wire form, reporting unparsable sizes and
// durations as field errors; the service checks everything else.
func PoolFromDTO(in apitypes.Pool) (domain.Pool, error) {
	var errs domain.FieldErrors
	p := domain.Pool{
		Name: in.Name, Executor: in.Executor, GPUType: in.GPUType,
		MaxGPUsPerJob: in.MaxGPUsPerJob, MaxNodesPerJob: in.MaxNodesPerJob, MaxRunning: in.MaxRunning,
		Borrowing: in.Borrowing, Preemption: in.Preemption,
	}
	for i, n := range in.Nodes {
		mem := parseSize(&errs, fmt.Sprintf("nodes[%d].memory", i), n.Memory)
		p.Nodes = append(p.Nodes, domain.Node{Name: n.Name, CPUs: n.CPUs, Memory: mem, GPUs: n.GPUs})
	}
	if in.MaxTimeout != "" {
		d, err := domain.ParseDuration(in.MaxTimeout)
		if err != nil {
			errs.Add("max_timeout", "%v", err)
		}
		p.MaxTimeout = domain.Duration(d)
	}
	p.LogLimit = parseSize(&errs, "log_limit", in.LogLimit)
	p.Rates = ratesFromDTO(&errs, in.Rates)
	if s := in.IdleStop; s != nil {
		p.IdleStop.Below = s.Below
		if s.For == "" {
			errs.Add("idle_stop.for", "is required with idle_stop; give a duration such as 30m")
		} else if d, err := domain.ParseDuration(s.For); err != nil {
			errs.Add("idle_stop.for", "%v", err)
		} else {
			p.IdleStop.For = domain.Duration(d)
		}
	}
	for _, pr := range in.Priorities {
		p.Priorities = append(p.Priorities, domain.Priority(pr))
	}
	return p, errs.Err()
}

// ratesDTO writes each rate as a decimal, leaving free ones out.
func ratesDTO(r domain.Rates) apitypes.PoolRates {
	text := func(m domain.Money) apitypes.Amount {
		if m == 0 {
			return ""
		}
		return apitypes.Amount(m.String())
	}
	return apitypes.PoolRates{GPUHour: text(r.GPUHour), CPUHour: text(r.CPUHour), MemoryGiBHour: text(r.MemoryGiBHour),
		LocalGiBMonth: text(r.LocalGiBMonth), ObjectGiBMonth: text(r.ObjectGiBMonth)}
}

// ratesFromDTO parses each rate; "" is free. A bad amount is added to errs
// under rates.NAME. Negative amounts parse: the service refuses them.
func ratesFromDTO(errs *domain.FieldErrors, in apitypes.PoolRates) domain.Rates {
	parse := func(name string, s apitypes.Amount) domain.Money {
		if s == "" {
			return 0
		}
		m, err := domain.ParseMoney(string(s))
		if err != nil {
			errs.Add("rates."+name, "%v", err)
		}
		return m
	}
	return domain.Rates{GPUHour: parse("gpu_hour", in.GPUHour), CPUHour: parse("cpu_hour", in.CPUHour),
		MemoryGiBHour: parse("memory_gib_hour", in.MemoryGiBHour), LocalGiBMonth: parse("local_gib_month", in.LocalGiBMonth),
		ObjectGiBMonth: parse("object_gib_month", in.ObjectGiBMonth)}
}

func quotaDTO(q domain.Quota) apitypes.Quota {
	g, b := q.Guaranteed, q.Borrow
	return apitypes.Quota{Project: q.Project, Pool: q.Pool,
		GPUs: g.GPUs, CPUs: g.CPUs, Memory: g.Memory.String(), Jobs: g.Jobs,
		Borrow:      apitypes.QuotaBorrow{GPUs: b.GPUs, CPUs: b.CPUs, Memory: b.Memory.String()},
		MaxPriority: string(q.MaxPriority), UpdatedAt: q.UpdatedAt}
}

// QuotaFromDTO converts the wire form, reporting unparsable sizes as field
// errors; the service checks everything else.
func QuotaFromDTO(in apitypes.Quota) (domain.Quota, error) {
	var errs domain.FieldErrors
	q := domain.Quota{Project: in.Project, Pool: in.Pool,
		Guaranteed:  domain.Limits{GPUs: in.GPUs, CPUs: in.CPUs, Memory: parseSize(&errs, "memory", in.Memory), Jobs: in.Jobs},
		Borrow:      domain.Limits{GPUs: in.Borrow.GPUs, CPUs: in.Borrow.CPUs, Memory: parseSize(&errs, "borrow.memory", in.Borrow.Memory)},
		MaxPriority: domain.Priority(in.MaxPriority)}
	return q, errs.Err()
}

// parseSize parses a size; "" is 0. A bad value is added to errs at path.
func parseSize(errs *domain.FieldErrors, path, s string) domain.ByteSize {
	if s == "" {
		return 0
	}
	b, err := domain.ParseByteSize(s)
	if err != nil {
		errs.Add(path, "%v", err)
	}
	return b
}
