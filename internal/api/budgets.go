package api

import (
	"math"
	"net/http"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// budgetRoutes serves project budgets.
func (h *handler) budgetRoutes(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/budgets", h.auth(h.listBudgets))
	mux.Handle("PUT /api/v1/budgets/{project}", h.auth(h.putBudget))
	mux.Handle("DELETE /api/v1/budgets/{project}", h.auth(h.deleteBudget))
}

// listBudgets serves GET /api/v1/budgets?project=.
func (h *handler) listBudgets(w http.ResponseWriter, r *http.Request, p service.Principal) {
	sts, err := h.svc.Cost.Budgets(r.Context(), p, r.URL.Query().Get("project"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.BudgetList{Budgets: make([]apitypes.Budget, len(sts))}
	for i, st := range sts {
		out.Budgets[i] = h.budgetDTO(st)
	}
	writeJSON(w, http.StatusOK, out)
}

// putBudget serves PUT /api/v1/budgets/{project}: create or replace.
func (h *handler) putBudget(w http.ResponseWriter, r *http.Request, p service.Principal) {
	project := r.PathValue("project")
	var req apitypes.Budget
	if err := decodeBody(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	errs := checkPathName("project", req.Project, project)
	if c := req.Currency; c != "" && c != h.cfg.currency() {
		errs.Add("currency", "budgets are in the server's currency, %s, not %q; leave currency out, or change the server config's currency", h.cfg.currency(), c)
	}
	if err := errs.Err(); err != nil {
		h.writeError(w, r, err)
		return
	}
	req.Project = project
	b, err := BudgetFromDTO(req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	st, err := h.svc.Cost.SetBudget(r.Context(), p, b)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, h.budgetDTO(st))
}

// deleteBudget serves DELETE /api/v1/budgets/{project}.
func (h *handler) deleteBudget(w http.ResponseWriter, r *http.Request, p service.Principal) {
	if err := h.svc.Cost.DeleteBudget(r.Context(), p, r.PathValue("project")); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// BudgetFromDTO converts the wire form, reporting unparsable amounts and
// times as field errors; the service checks everything else.
func BudgetFromDTO(in apitypes.Budget) (domain.Budget, error) {
	var errs domain.FieldErrors
	b := domain.Budget{Project: in.Project, Period: in.Period, Thresholds: in.Thresholds, Action: domain.BudgetAction(in.Action)}
	if in.Amount != "" {
		m, err := domain.ParseMoney(string(in.Amount))
		if err != nil {
			errs.Add("amount", "%v", err)
		}
		b.Amount = m
	}
	if in.MaxRatePerHour != "" {
		m, err := domain.ParseMoney(string(in.MaxRatePerHour))
		if err != nil {
			errs.Add("max_rate_per_hour", "%v", err)
		}
		b.MaxRate = m
	}
	b.Start = parseBudgetTime(&errs, "start", in.Start)
	b.End = parseBudgetTime(&errs, "end", in.End)
	return b, errs.Err()
}

// parseBudgetTime reads an RFC 3339 time or a date (midnight UTC); "" is
// the zero time. A bad value is added to errs at path.
func parseBudgetTime(errs *domain.FieldErrors, path, s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	for _, layout := range []string{time.RFC3339Nano, time.DateOnly} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC()
		}
	}
	errs.Add(path, "must be a date such as 2026-12-01 or an RFC 3339 time such as 2026-12-01T00:00:00Z, got %q", s)
	return time.Time{}
}

// budgetDTO is the wire form of a budget and its spend, in the server's
// currency.
func (h *handler) budgetDTO(st service.BudgetStatus) apitypes.Budget {
	b := st.Budget
	out := apitypes.Budget{Project: b.Project, Amount: apitypes.Amount(b.Amount.String()), Currency: h.cfg.currency(),
		Period: b.Period, Thresholds: b.Thresholds, Action: string(b.Action), UpdatedAt: b.UpdatedAt, InForce: st.InForce}
	if b.MaxRate > 0 {
		out.MaxRatePerHour = apitypes.Amount(b.MaxRate.String())
	}
	if out.Thresholds == nil {
		out.Thresholds = []int{}
	}
	if b.Period != domain.BudgetMonthly {
		out.Start, out.End = rfc3339(b.Start), rfc3339(b.End)
	}
	if !st.InForce {
		return out
	}
	u := st.Use
	out.PeriodName, out.PeriodStart, out.PeriodEnd = u.Period, timePtr(u.From.UTC()), timePtr(u.To.UTC())
	out.Spent, out.Committed, out.CommittedUnbounded = apitypes.Amount(u.Spent.String()), apitypes.Amount(u.Committed.String()), u.Unbounded
	out.RatePerHour = apitypes.Amount(u.Rate.String())
	if b.Amount > 0 {
		out.PercentUsed = math.Round(float64(u.Spent)*10000/float64(b.Amount)) / 100
	}
	return out
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}
