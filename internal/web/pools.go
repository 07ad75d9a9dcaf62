package web

import (
	"cmp"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/service"
)

func (h *handler) poolRoutes(mux *http.ServeMux) {
	mux.Handle("GET /pools", h.authed(h.pools))
	mux.Handle("GET /pools/live", h.authed(h.poolsLive))
}

// bar is one <meter>: how much of Max is in use, and the same in words.
type bar struct {
	Label      string
	Value, Max float64
	High       float64 // from here on the meter shows it nearly full
	Text       string
}

func newBar(label string, value, most float64, text string) *bar {
	return &bar{Label: label, Value: value, Max: most, High: most * 0.9, Text: text}
}

// quotaRow is one project in one pool: its quota, with what it holds now
// and borrows.
type quotaRow struct {
	Project     string
	HasQuota    bool
	Guaranteed  string
	Borrow      string
	MaxPriority string
	Effective   string // the guarantee with the grants active now, when they change it
	Used        string
	Borrowed    string
	Bar         *bar // use against the guarantee, in the pool's main resource; nil when unlimited
}

// poolView is one pool on the page.
type poolView struct {
	P         domain.Pool
	Capacity  string
	Allocated string
	Bars      []*bar
	Open      bool
	Rules     []string
	Projects  []quotaRow
}

// readPools reads every pool the viewer may read with its quotas and what
// its active jobs hold now, all as the service answers the viewer.
func (h *handler) readPools(r *http.Request, v *viewer) ([]poolView, error) {
	ctx := r.Context()
	pools, err := h.svc.Pools.ListPools(ctx, v.p)
	if err != nil {
		return nil, err
	}
	quotas, err := h.svc.Pools.ListQuotas(ctx, v.p, "", "")
	if err != nil {
		return nil, err
	}
	usage, err := h.svc.Jobs.Usage(ctx, v.p)
	if err != nil {
		return nil, err
	}
	useOf := map[string]service.PoolUsage{}
	for _, u := range usage {
		useOf[u.Pool] = u
	}
	out := make([]poolView, 0, len(pools))
	for _, p := range pools {
		c, u := p.Capacity(), useOf[p.Name]
		pv := poolView{P: p, Capacity: limitsText(c, false), Allocated: limitsText(u.Allocated, true), Rules: poolRules(p)}
		pv.Open, _ = h.svc.Pools.PoolOpen(ctx, p.Name) // the pool was just read: a failure only hides the mark
		if c.GPUs > 0 {
			pv.Bars = append(pv.Bars, newBar("GPUs", float64(u.Allocated.GPUs), float64(c.GPUs), fmt.Sprintf("%d of %d GPUs", u.Allocated.GPUs, c.GPUs)))
		}
		pv.Bars = append(pv.Bars,
			newBar("CPUs", u.Allocated.CPUs, c.CPUs, fmt.Sprintf("%s of %s CPUs", num(u.Allocated.CPUs), num(c.CPUs))),
			newBar("Memory", gib(u.Allocated.Memory), gib(c.Memory), fmt.Sprintf("%s of %s memory", u.Allocated.Memory, c.Memory)))
		pv.Projects = quotaRows(p, c, quotas, u.Projects)
		out = append(out, pv)
	}
	return out, nil
}

// quotaRows are the pool's quotas, and the projects that hold some of it
// or have a compute grant there without one, by project.
func quotaRows(p domain.Pool, c domain.Limits, quotas []domain.Quota, use []service.ProjectUsage) []quotaRow {
	usedBy := map[string]service.ProjectUsage{}
	for _, u := range use {
		usedBy[u.Project] = u
	}
	var rows []quotaRow
	seen := map[string]bool{}
	add := func(q *domain.Quota, project string) {
		seen[project] = true
		u, known := usedBy[project]
		row := quotaRow{Project: project, Used: limitsText(u.Used, true), Borrowed: limitsText(u.Borrowed, true)}
		if q == nil && u.HasQuota { // a compute grant makes one
			row.Effective = guaranteeText(u.Guaranteed)
		}
		if q != nil {
			row.HasQuota = true
			row.Guaranteed = guaranteeText(q.Guaranteed)
			row.Borrow = "none"
			if b := q.Borrow; b != (domain.Limits{}) {
				row.Borrow = "up to " + limitsText(b, false)
				if !p.Borrowing {
					row.Borrow += " (the pool lends nothing)"
				}
			}
			row.MaxPriority = string(q.MaxPriority)
			if row.MaxPriority == "" {
				row.MaxPriority = string(domain.PriorityNormal)
			}
			g := q.Guaranteed
			if known && u.HasQuota && u.Guaranteed != g {
				row.Effective = guaranteeText(u.Guaranteed)
				g = u.Guaranteed
			}
			switch {
			case c.GPUs > 0 && g.GPUs > 0:
				row.Bar = newBar("GPUs of the guarantee", float64(u.Used.GPUs), float64(g.GPUs), fmt.Sprintf("%d of %d guaranteed GPUs", u.Used.GPUs, g.GPUs))
			case c.GPUs == 0 && g.CPUs > 0:
				row.Bar = newBar("CPUs of the guarantee", u.Used.CPUs, g.CPUs, fmt.Sprintf("%s of %s guaranteed CPUs", num(u.Used.CPUs), num(g.CPUs)))
			}
		}
		rows = append(rows, row)
	}
	for i := range quotas {
		if q := &quotas[i]; q.Pool == p.Name {
			add(q, q.Project)
		}
	}
	for _, u := range use {
		if !seen[u.Project] {
			add(nil, u.Project)
		}
	}
	slices.SortStableFunc(rows, func(a, b quotaRow) int { return cmp.Compare(a.Project, b.Project) })
	return rows
}

// poolRules says in a few words what the pool allows.
func poolRules(p domain.Pool) []string {
	var out []string
	if p.Borrowing {
		out = append(out, "lends idle capacity above quotas")
	} else {
		out = append(out, "no borrowing")
	}
	if p.Preemption {
		out = append(out, "preempts")
	}
	if p.MaxRunning > 0 {
		out = append(out, fmt.Sprintf("at most %d running jobs", p.MaxRunning))
	}
	if p.MaxGPUsPerJob > 0 {
		out = append(out, fmt.Sprintf("at most %d GPUs a job", p.MaxGPUsPerJob))
	}
	if p.MaxNodesPerJob > 0 {
		out = append(out, fmt.Sprintf("at most %d nodes a job", p.MaxNodesPerJob))
	}
	if p.MaxTimeout > 0 {
		out = append(out, "timeout at most "+p.MaxTimeout.String())
	}
	if len(p.Priorities) > 0 {
		ps := make([]string, len(p.Priorities))
		for i, pr := range p.Priorities {
			ps[i] = string(pr)
		}
		out = append(out, "priorities "+strings.Join(ps, ", "))
	}
	return out
}

// limitsText is an amount in a few words: "2 GPU · 8 CPU · 32GiB · 3
// jobs"; jobs says whether to count jobs.
func limitsText(l domain.Limits, jobs bool) string {
	var parts []string
	if l.GPUs > 0 {
		parts = append(parts, fmt.Sprintf("%d GPU", l.GPUs))
	}
	if l.CPUs > 0 {
		parts = append(parts, num(l.CPUs)+" CPU")
	}
	if l.Memory > 0 {
		parts = append(parts, l.Memory.String())
	}
	if jobs && l.Jobs > 0 {
		parts = append(parts, plural(l.Jobs, "job"))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, " · ")
}

// guaranteeText is a quota's guarantee, where CPUs, memory and jobs of 0
// are not limited.
func guaranteeText(g domain.Limits) string {
	parts := []string{fmt.Sprintf("%d GPU", g.GPUs)}
	if g.CPUs > 0 {
		parts = append(parts, num(g.CPUs)+" CPU")
	} else {
		parts = append(parts, "any CPU")
	}
	if g.Memory > 0 {
		parts = append(parts, g.Memory.String())
	} else {
		parts = append(parts, "any memory")
	}
	if g.Jobs > 0 {
		parts = append(parts, plural(g.Jobs, "job"))
	}
	return strings.Join(parts, " · ")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// gib is a size in GiB, for a meter (its numbers stay short).
func gib(b domain.ByteSize) float64 { return float64(b) / (1 << 30) }

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// poolsData is the pools page: the pools now (its live part) and what
// they held over the last historyWindow.
type poolsData struct {
	Pools       []poolView
	History     template.HTML // drawn by svgChart from numbers and escaped names
	HistoryNote string
}

// The pools' history: the last day, in quarter hours.
const (
	historyWindow = 24 * time.Hour
	historySteps  = 96
)

// history draws what each pool held over the last historyWindow, one
// chart per pool: its GPUs, or its CPUs in a pool without GPUs, against
// its capacity now.
func (h *handler) history(r *http.Request, v *viewer) (template.HTML, error) {
	hs, err := h.svc.Cost.UsageHistory(r.Context(), v.p, historyWindow, historySteps)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, ph := range hs {
		what, ys, most := "GPUs", ph.GPUs, float64(ph.Capacity.GPUs)
		if ph.Capacity.GPUs == 0 {
			what, ys, most = "CPUs", ph.CPUs, ph.Capacity.CPUs
		}
		held := series{Name: what + " held"}
		capacity := series{Name: "capacity"}
		end := ph.Start.Add(ph.Step * time.Duration(len(ys)))
		for i, y := range ys {
			x := -end.Sub(ph.Start.Add(ph.Step * time.Duration(i))).Hours() // the step's start, in hours before now
			held.Points = append(held.Points, point{X: x, Y: y})
			capacity.Points = append(capacity.Points, point{X: x, Y: most})
		}
		title := fmt.Sprintf("%s: %s held, average per %s", ph.Pool, what, domain.Duration(ph.Step))
		b.WriteString(`<figure class="chart-box">`)
		b.WriteString(string(svgChart(title, "hours before now", nil, held, capacity)))
		b.WriteString(`</figure>`)
	}
	return template.HTML(b.String()), nil
}

func (h *handler) pools(w http.ResponseWriter, r *http.Request, v *viewer) {
	pools, err := h.readPools(r, v)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d := poolsData{Pools: pools}
	if d.History, err = h.history(r, v); err != nil {
		_, msg := statusOf(err)
		d.HistoryNote = "The history cannot be drawn: " + msg
	}
	h.render(w, r, http.StatusOK, "pools.html", page{Title: "Pools and quotas", Nav: "pools", User: v, CSRF: v.csrf, Data: d})
}

// poolsLive sends the pools' part whenever what they hold changes.
func (h *handler) poolsLive(w http.ResponseWriter, r *http.Request, v *viewer) {
	h.live(w, r, func() (string, error) {
		pools, err := h.readPools(r, v)
		if err != nil {
			return "", err
		}
		return h.pagePart("pools.html", "pools-body", pools)
	})
}
