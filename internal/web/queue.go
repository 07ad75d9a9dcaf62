package web

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"trainyard/internal/domain"
)

func (h *handler) queueRoutes(mux *http.ServeMux) {
	mux.Handle("GET /queue", h.authed(h.queue))
	mux.Handle("GET /queue/live", h.authed(h.queueLive))
}

// queueShown is how many waiting jobs the page shows of one pool; it says
// how many more wait.
const queueShown = 200

// queueRow is one waiting job: the scheduler's queue entry (position,
// reason and its numbers, estimated start) and the job's request.
type queueRow struct {
	E         domain.QueueEntry
	Resources string
	Waiting   string // how long since it was submitted
	StartsIn  string // how long until its estimated start ("" when unknown)
}

// queuePool is one pool's part of the queue.
type queuePool struct {
	Name string
	Rows []queueRow // at most queueShown, in scheduling order
	More int        // how many more of the jobs the viewer may see wait
}

type queueData struct {
	Pool   string   // the pool picked ("" for every pool)
	Pools  []string // the picker's choices
	Groups []queuePool
	Live   string
}

// readQueue reads the queue of pool ("" for every pool the viewer may
// read), as the service answers the viewer, grouped by pool.
func (h *handler) readQueue(r *http.Request, v *viewer, pool string) ([]queuePool, error) {
	entries, err := h.svc.Pools.Queue(r.Context(), v.p, pool)
	if err != nil {
		return nil, err
	}
	var names []string
	if pool != "" {
		names = []string{pool}
	} else {
		pools, err := h.svc.Pools.ListPools(r.Context(), v.p)
		if err != nil {
			return nil, err
		}
		for _, p := range pools {
			names = append(names, p.Name)
		}
	}
	byPool := map[string][]domain.QueueEntry{}
	for _, e := range entries {
		if !slices.Contains(names, e.Pool) {
			names = append(names, e.Pool) // a pool gone under waiting work
		}
		byPool[e.Pool] = append(byPool[e.Pool], e)
	}
	groups := make([]queuePool, 0, len(names))
	for _, name := range names {
		es := byPool[name]
		slices.SortStableFunc(es, func(a, b domain.QueueEntry) int { return cmp.Compare(a.Position, b.Position) })
		g := queuePool{Name: name}
		if len(es) > queueShown {
			g.More = len(es) - queueShown
			es = es[:queueShown]
		}
		now := time.Now()
		for _, e := range es {
			row := queueRow{E: e, Waiting: inMinutes(now.Sub(e.Submitted)), Resources: resources(e.Resources)}
			if !e.EstimatedStart.IsZero() {
				row.StartsIn = inMinutes(e.EstimatedStart.Sub(now))
			}
			g.Rows = append(g.Rows, row)
		}
		groups = append(groups, g)
	}
	return groups, nil
}

// inMinutes is roughly, to the minute: the queue's live part changes
// when its order, reasons or estimates do, or a minute passes, not every
// second.
func inMinutes(d time.Duration) string {
	switch {
	case d < time.Minute:
		return "under a minute"
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	}
	return roughly(d.Truncate(time.Minute))
}

// queuePoolParam reads ?pool=.
func queuePoolParam(r *http.Request) string { return strings.TrimSpace(r.URL.Query().Get("pool")) }

func (h *handler) queue(w http.ResponseWriter, r *http.Request, v *viewer) {
	pool := queuePoolParam(r)
	groups, err := h.readQueue(r, v, pool)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d := queueData{Pool: pool, Groups: groups, Live: "/queue/live"}
	if pool != "" {
		d.Live += "?" + url.Values{"pool": {pool}}.Encode()
	}
	if pools, err := h.svc.Pools.ListPools(r.Context(), v.p); err == nil {
		for _, p := range pools {
			d.Pools = append(d.Pools, p.Name)
		}
	}
	title := "Queue"
	if pool != "" {
		title = "Queue of " + pool
	}
	h.render(w, r, http.StatusOK, "queue.html", page{Title: title, Nav: "queue", User: v, CSRF: v.csrf, Data: d})
}

// queueLive sends the queue's tables whenever they change: order,
// reasons and estimates follow the scheduler's passes.
func (h *handler) queueLive(w http.ResponseWriter, r *http.Request, v *viewer) {
	pool := queuePoolParam(r)
	h.live(w, r, func() (string, error) {
		groups, err := h.readQueue(r, v, pool)
		if err != nil {
			return "", err
		}
		return h.pagePart("queue.html", "queue-groups", groups)
	})
}

// pagePart renders the template name defined in page template file (a
// live part of that page alone; h.fragment renders those of parts.html).
func (h *handler) pagePart(file, name string, data any) (string, error) {
	t, ok := h.tmpl.pages[file]
	if !ok {
		return "", fmt.Errorf("no page template %q", file)
	}
	var b strings.Builder
	if err := t.ExecuteTemplate(&b, name, data); err != nil {
		return "", err
	}
	return b.String(), nil
}
