package web

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"trainyard/internal/domain"
	"trainyard/internal/service"
)

func (h *handler) sweepRoutes(mux *http.ServeMux) {
	mux.Handle("GET /sweeps", h.authed(h.sweeps))
	mux.Handle("GET /sweeps/{id}", h.authed(h.sweep))
}

// sweepsShown is how many sweeps the list shows.
const sweepsShown = 100

// sweepMembersShown is how many members a sweep's page shows: the
// newest, in index order, with their params from the sweep's definition.
const sweepMembersShown = 200

type sweepsData struct {
	Sweeps []domain.Sweep
}

type sweepMember struct {
	Job    *domain.Job
	Index  string
	Params string
	Best   bool
}

type sweepData struct {
	S        service.SweepView
	Counts   []stateCount
	Members  []sweepMember
	More     int // older members not shown
	Params   string
	Canceled bool
}

type stateCount struct {
	State domain.JobState
	N     int
}

func (h *handler) sweeps(w http.ResponseWriter, r *http.Request, v *viewer) {
	list, err := h.svc.Jobs.ListSweeps(r.Context(), v.p, "", sweepsShown)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "sweeps.html", page{Title: "Sweeps", Nav: "sweeps", User: v, CSRF: v.csrf, Data: sweepsData{Sweeps: list}})
}

func (h *handler) sweep(w http.ResponseWriter, r *http.Request, v *viewer) {
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 {
		h.fail(w, r, domain.Errorf(domain.ErrNotFound, "there is no sweep %q: sweep ids are whole numbers; see the sweep list", raw))
		return
	}
	sv, err := h.svc.Jobs.GetSweep(r.Context(), v.p, id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d := sweepData{S: sv, Canceled: !sv.CanceledAt.IsZero(), Params: strings.Join(slices.Sorted(maps.Keys(sv.Spec.Params)), ", ")}
	for _, st := range domain.JobStates() {
		if n := sv.Counts[st]; n > 0 {
			d.Counts = append(d.Counts, stateCount{st, n})
		}
	}
	// The newest members, shown oldest first: members are stored in
	// index order, so the last len(rows) of the definition's points are
	// theirs.
	rows, _, err := h.svc.Jobs.List(r.Context(), v.p, service.ListOptions{Sweep: id, Limit: sweepMembersShown})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	slices.Reverse(rows)
	d.More = max(sv.Members-len(rows), 0)
	points := service.SweepPoints(sv.Sweep)
	offset := len(points) - len(rows)
	for i := range rows {
		row := &rows[i]
		m := sweepMember{Job: row, Best: sv.Best != nil && sv.Best.JobID == row.ID}
		if k := offset + i; k >= 0 && k < len(points) && len(rows) == min(sv.Members, sweepMembersShown) {
			pt := points[k]
			m.Index = strconv.Itoa(pt.Index)
			var ps []string
			for _, key := range slices.Sorted(maps.Keys(pt.Params)) {
				ps = append(ps, key+"="+pt.Params[key])
			}
			m.Params = strings.Join(ps, " ")
		}
		d.Members = append(d.Members, m)
	}
	h.render(w, r, http.StatusOK, "sweep.html", page{Title: "Sweep " + raw + " (" + sv.Name + ")", Nav: "sweeps", User: v, CSRF: v.csrf, Data: d})
}
