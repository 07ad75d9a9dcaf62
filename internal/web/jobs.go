package web

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"trainyard/internal/domain"
	"trainyard/internal/service"
)

func (h *handler) jobRoutes(mux *http.ServeMux) {
	mux.Handle("GET /jobs", h.authed(h.jobs))
	mux.Handle("GET /jobs/live", h.authed(h.jobsLive))
	mux.Handle("GET /jobs/{id}", h.authed(h.job))
	mux.Handle("GET /jobs/{id}/live", h.authed(h.jobLive))
	mux.Handle("GET /jobs/{id}/charts", h.authed(h.jobCharts))
	mux.Handle("GET /jobs/{id}/log", h.authed(h.logStream))
	mux.Handle("GET /jobs/{id}/log.txt", h.authed(h.logDownload))
	mux.Handle("GET /jobs/{id}/files/{path...}", h.authed(h.download))
	mux.Handle("GET /jobs/{id}/checkpoints/{name}/archive", h.authed(h.checkpoint))
	mux.Handle("POST /jobs/{id}/cancel", h.action(h.cancel))
	mux.Handle("POST /jobs/{id}/hold", h.action(h.hold))
	mux.Handle("POST /jobs/{id}/release", h.action(h.release))
	mux.Handle("POST /jobs/{id}/rerun", h.action(h.rerun))
}

// pageSize is how many jobs a page of the list shows.
const pageSize = 50

// jobFilter is the job list's filter, as its form and links carry it.
type jobFilter struct {
	State, Project, User, Pool, Name string
	Before                           int64 // cursor: jobs older than this id
}

func parseJobFilter(q url.Values) (jobFilter, error) {
	f := jobFilter{State: q.Get("state"), Project: strings.TrimSpace(q.Get("project")), User: strings.TrimSpace(q.Get("user")),
		Pool: strings.TrimSpace(q.Get("pool")), Name: strings.TrimSpace(q.Get("q"))}
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return f, domain.FieldErrors{{Path: "before", Message: fmt.Sprintf("is not a job id: %q; start again from the first page", v)}}
		}
		f.Before = n
	}
	return f, nil
}

// query is f as a query string, without the cursor.
func (f jobFilter) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"state": f.State, "project": f.Project, "user": f.User, "pool": f.Pool, "q": f.Name} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

func (f jobFilter) options() service.ListOptions {
	o := service.ListOptions{Project: f.Project, BeforeID: f.Before, Limit: pageSize,
		User: f.User, Pool: f.Pool, Name: f.Name}
	if f.State != "" {
		o.States = []domain.JobState{domain.JobState(f.State)}
	}
	return o
}

// jobRow is one row of the job list.
type jobRow struct {
	Job       *domain.Job
	Resources string
	Cost      string
}

type jobsData struct {
	Filter   jobFilter
	Filtered bool
	States   []domain.JobState
	Rows     []jobRow
	Live     string // the rows' live updates
	Newer    string
	Older    string
}

// rows reads one page of the list as f selects it, priced.
func (h *handler) rows(r *http.Request, v *viewer, f jobFilter) ([]jobRow, bool, error) {
	jobs, more, err := h.svc.Jobs.List(r.Context(), v.p, f.options())
	if err != nil {
		return nil, false, err
	}
	costs, err := h.svc.Jobs.Costs(r.Context(), jobs)
	if err != nil {
		return nil, false, err
	}
	rows := make([]jobRow, len(jobs))
	for i := range jobs {
		rows[i] = jobRow{Job: &jobs[i], Resources: resources(jobs[i].Resources)}
		if i < len(costs) && costs[i].Priced {
			rows[i].Cost = costs[i].Cost.String() + " " + h.cfg.Currency
		}
	}
	return rows, more, nil
}

func (h *handler) jobs(w http.ResponseWriter, r *http.Request, v *viewer) {
	f, err := parseJobFilter(r.URL.Query())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	rows, more, err := h.rows(r, v, f)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	q := f.query()
	d := jobsData{Filter: f, Filtered: len(q) > 0, States: domain.JobStates(), Rows: rows}
	live := url.Values{}
	for k, vs := range q {
		live[k] = vs
	}
	if f.Before > 0 {
		live.Set("before", strconv.FormatInt(f.Before, 10))
		d.Newer = "/jobs?" + q.Encode()
	}
	d.Live = "/jobs/live?" + live.Encode()
	if more {
		older := f.query()
		older.Set("before", strconv.FormatInt(rows[len(rows)-1].Job.ID, 10))
		d.Older = "/jobs?" + older.Encode()
	}
	h.render(w, r, http.StatusOK, "jobs.html", page{Title: "Jobs", Nav: "jobs", User: v, CSRF: v.csrf, Data: d})
}

// jobsLive sends the list's rows whenever they change.
func (h *handler) jobsLive(w http.ResponseWriter, r *http.Request, v *viewer) {
	f, err := parseJobFilter(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.live(w, r, func() (string, error) {
		rows, _, err := h.rows(r, v, f)
		if err != nil {
			return "", err
		}
		return h.fragment("job-rows", rows)
	})
}

// resources is a job's request in a few words: "2 CPU · 1 GPU · 8.0 GiB".
func resources(r domain.Resources) string {
	var parts []string
	if r.Nodes > 1 {
		parts = append(parts, fmt.Sprintf("%d nodes", r.Nodes))
	}
	if r.CPUs > 0 {
		parts = append(parts, strconv.FormatFloat(r.CPUs, 'f', -1, 64)+" CPU")
	}
	if r.GPUs > 0 {
		parts = append(parts, fmt.Sprintf("%d GPU", r.GPUs))
	}
	if r.Memory > 0 {
		parts = append(parts, r.Memory.String())
	}
	return strings.Join(parts, " · ")
}
