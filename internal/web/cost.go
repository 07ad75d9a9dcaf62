package web

import (
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// The cost page is trainyard cost, trainyard budget ls and the waste part
// of trainyard report on one page: spend over a window by project, pool
// and user, each project's spend per day, budgets and their use, and what
// failed attempts and idle CPUs cost. Every figure comes from the service
// for the signed-in user, so a member sees only their projects'.

func (h *handler) costRoutes(mux *http.ServeMux) {
	mux.Handle("GET /cost", h.authed(h.cost))
}

// costWindows are the windows the form offers, as trainyard cost --since
// takes them; any other value the API accepts works in a link.
var costWindows = []string{"24h", "7d", "30d", "90d"}

// defaultCostSince is the window the page shows first, as trainyard cost.
const defaultCostSince = "30d"

// chartProjects is how many projects the spend chart draws at most (one
// report by day each, and one colour each).
var chartProjects = len(palette)

// costFilter is the cost page's form.
type costFilter struct {
	Since   string // "30d", or a date or time
	Project string // "": every project the viewer may read
}

// parseCostFilter reads the form: since as the API's ?since= (a duration
// back from now or a time), project as is.
func parseCostFilter(q url.Values) (costFilter, service.CostQuery, error) {
	f := costFilter{Since: strings.TrimSpace(q.Get("since")), Project: strings.TrimSpace(q.Get("project"))}
	if f.Since == "" {
		f.Since = defaultCostSince
	}
	cq := service.CostQuery{Project: f.Project}
	if d, err := domain.ParseDuration(f.Since); err == nil && d > 0 {
		cq.Window = d
		return f, cq, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04", time.DateOnly} {
		if t, err := time.Parse(layout, f.Since); err == nil {
			cq.Since = t.UTC()
			return f, cq, nil
		}
	}
	return f, cq, domain.FieldErrors{{Path: "since", Message: fmt.Sprintf("must be a duration back from now (30d, 12h) or a time (2026-03-01, RFC 3339), got %q", f.Since)}}
}

// costRow is one group's spend, with its share of the total for a bar.
type costRow struct {
	service.CostLine
	Storage domain.Money // by project: what its stored files cost
	Share   float64      // percent of the total compute cost
}

// budgetRow is a budget and its use, in currency units for a <meter>.
type budgetRow struct {
	service.BudgetStatus
	Spent, Amount, Low, High float64
	Percent                  float64
}

// usageRow is one project's held against used resources and its waste
// (service.Review).
type usageRow struct {
	service.ReviewLine
	CPUUsed, GPUUsed float64 // percent of what was held; -1 when nothing was held (or no GPU reading came)
}

type costData struct {
	Filter     costFilter
	Windows    []string
	Custom     bool // Filter.Since is not one of Windows
	Currency   string
	Since      time.Time
	Until      time.Time
	Projects   []costRow
	Total      costRow
	Pools      []costRow
	Users      []costRow
	Storage    domain.Money // the storage total
	Chart      template.HTML
	ChartNote  string
	Budgets    []budgetRow
	Usage      []usageRow
	UsageSince time.Time
	UsageTotal usageRow
	Oversized  []service.ReviewJob
	NearMemory []service.ReviewJob
	Under      float64 // percent: Oversized used under this of their CPUs
	Near       float64 // percent: NearMemory peaked at this of their limit or more
}

func (h *handler) cost(w http.ResponseWriter, r *http.Request, v *viewer) {
	f, cq, err := parseCostFilter(r.URL.Query())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d, err := h.costData(r, v, f, cq)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "cost.html", page{Title: "Cost", Nav: "cost", User: v, CSRF: v.csrf, Data: d})
}

// costData reads everything the page shows. The service decides what the
// viewer may read: a project they hold no role in is refused, and without
// one every report covers only the projects they do.
func (h *handler) costData(r *http.Request, v *viewer, f costFilter, cq service.CostQuery) (costData, error) {
	ctx := r.Context()
	d := costData{Filter: f, Windows: costWindows, Custom: true, Currency: h.cfg.Currency}
	for _, w := range costWindows {
		if w == f.Since {
			d.Custom = false
		}
	}
	cq.By = "project"
	rep, err := h.svc.Cost.Report(ctx, v.p, cq)
	if err != nil {
		return d, err
	}
	d.Since, d.Until = rep.Since, rep.Until
	stored, err := h.svc.Cost.StorageReport(ctx, v.p, cq)
	if err != nil {
		return d, err
	}
	storage := map[string]domain.Money{}
	for _, l := range stored.Lines {
		storage[l.Group] = l.Cost
	}
	d.Storage = stored.Total.Cost
	d.Projects = costRows(rep)
	for i := range d.Projects {
		d.Projects[i].Storage = storage[d.Projects[i].Group]
		delete(storage, d.Projects[i].Group)
	}
	for _, project := range slices.Sorted(maps.Keys(storage)) { // stored files of a project that ran nothing in the window
		d.Projects = append(d.Projects, costRow{CostLine: service.CostLine{Group: project}, Storage: storage[project]})
	}
	d.Total = costRow{CostLine: rep.Total, Storage: stored.Total.Cost}
	for _, by := range []string{"pool", "user"} {
		q := cq
		q.By, q.Since, q.Window = by, rep.Since, 0 // the same window to the second
		g, err := h.svc.Cost.Report(ctx, v.p, q)
		if err != nil {
			return d, err
		}
		if by == "pool" {
			d.Pools = costRows(g)
		} else {
			d.Users = costRows(g)
		}
	}
	if d.Chart, d.ChartNote, err = h.spendChart(r, v, rep); err != nil {
		return d, err
	}
	budgets, err := h.svc.Cost.Budgets(ctx, v.p, f.Project)
	if err != nil {
		return d, err
	}
	for _, b := range budgets {
		d.Budgets = append(d.Budgets, budgetRowOf(b))
	}
	rv, err := h.svc.Cost.Review(ctx, v.p, service.ReviewQuery{Project: f.Project, Since: rep.Since, By: "project"})
	if err != nil {
		return d, err
	}
	d.UsageSince = rv.Since
	for _, l := range rv.Lines {
		d.Usage = append(d.Usage, usageRowOf(l))
	}
	d.UsageTotal = usageRowOf(rv.Total)
	d.Oversized, d.NearMemory = rv.Oversized, rv.NearMemory
	d.Under, d.Near = rv.Under*100, rv.Near*100
	return d, nil
}

// costRows are a report's lines with each one's share of its total.
func costRows(rep service.CostReport) []costRow {
	rows := make([]costRow, len(rep.Lines))
	for i, l := range rep.Lines {
		rows[i] = costRow{CostLine: l}
		if rep.Total.Cost > 0 {
			rows[i].Share = float64(l.Cost) * 100 / float64(rep.Total.Cost)
		}
	}
	return rows
}

// units is m in currency units, for a chart or a <meter>.
func units(m domain.Money) float64 { return float64(m) / float64(domain.MoneyUnit) }

// budgetRowOf puts a budget's thresholds on its meter: the lowest is
// where the bar turns from good, the highest below 100 where it turns bad.
func budgetRowOf(st service.BudgetStatus) budgetRow {
	b := budgetRow{BudgetStatus: st, Spent: units(st.Use.Spent), Amount: units(st.Budget.Amount)}
	low, high := 50, 80
	if ts := st.Budget.Thresholds; len(ts) > 0 {
		low, high = ts[0], ts[0]
		for _, t := range ts {
			if t < 100 {
				high = t
			}
		}
	}
	b.Low, b.High = b.Amount*float64(low)/100, b.Amount*float64(high)/100
	if st.Budget.Amount > 0 {
		b.Percent = float64(st.Use.Spent) * 100 / float64(st.Budget.Amount)
	}
	return b
}

func usageRowOf(l service.ReviewLine) usageRow {
	u := usageRow{ReviewLine: l, CPUUsed: -1, GPUUsed: -1}
	if l.CPUHours > 0 {
		u.CPUUsed = min(l.CPUHoursUsed*100/l.CPUHours, 100)
	}
	if l.GPUHours > 0 && l.GPUHoursUsed > 0 { // 0: no readings, as often as idle GPUs
		u.GPUUsed = min(l.GPUHoursUsed*100/l.GPUHours, 100)
	}
	return u
}

// spendChart draws each project's spend per UTC day over rep's window,
// one line per project for the projects that spent most (one report by
// day each: the service groups by day or by project, not both).
func (h *handler) spendChart(r *http.Request, v *viewer, rep service.CostReport) (template.HTML, string, error) {
	first, last := rep.Since.UTC().Truncate(24*time.Hour), rep.Until.UTC().Truncate(24*time.Hour) // UTC days
	days := int(last.Sub(first).Hours()/24) + 1
	projects := rep.Lines
	note := ""
	if len(projects) > chartProjects {
		projects = projects[:chartProjects]
		note = fmt.Sprintf("The chart shows the %d projects that spent most; the table has them all.", chartProjects)
	}
	var ss []series
	for _, l := range projects {
		if l.Cost == 0 {
			continue
		}
		byDay, err := h.svc.Cost.Report(r.Context(), v.p, service.CostQuery{Project: l.Group, Since: rep.Since, By: "day"})
		if err != nil {
			return "", "", err
		}
		pts := make([]point, days)
		for i := range pts {
			pts[i] = point{X: float64(i + 1)}
		}
		for _, dl := range byDay.Lines {
			t, err := time.Parse(time.DateOnly, dl.Group)
			if err != nil {
				continue
			}
			if i := int(t.Sub(first).Hours() / 24); i >= 0 && i < days {
				pts[i].Y = units(dl.Cost)
			}
		}
		ss = append(ss, series{Name: l.Group, Points: pts})
	}
	title := "Spend per day (" + h.cfg.Currency + ")"
	xLabel := fmt.Sprintf("day %s (1) to %s (%s)", first.Format(time.DateOnly), last.Format(time.DateOnly), strconv.Itoa(days))
	yFmt := func(y float64) string { return strconv.FormatFloat(y, 'f', 2, 64) }
	return svgChart(title, xLabel, yFmt, ss...), note, nil
}
