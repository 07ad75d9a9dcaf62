package api

import (
	"net/http"
	"slices"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// reportRoutes serves review reports.
func (h *handler) reportRoutes(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/report", h.auth(h.report))
}

// report serves GET /api/v1/report?project=&since=7d&by=project.
func (h *handler) report(w http.ResponseWriter, r *http.Request, p service.Principal) {
	q := r.URL.Query()
	rq := service.ReviewQuery{Project: q.Get("project"), By: q.Get("by")}
	var errs domain.FieldErrors
	rq.Since, rq.Window = sinceParam(&errs, q.Get("since"))
	if rq.By != "" && !slices.Contains(service.ReviewGroupings, rq.By) {
		errs.Add("by", "cannot group a review by %q; choose project or pool", rq.By)
	}
	if err := errs.Err(); err != nil {
		h.writeError(w, r, err)
		return
	}
	rep, err := h.svc.Cost.Review(r.Context(), p, rq)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, reportDTO(rep, h.cfg.currency()))
}

func reportDTO(rep service.Review, currency string) apitypes.Report {
	out := apitypes.Report{By: rep.By, Since: rep.Since, Until: rep.Until, Currency: currency,
		Lines: make([]apitypes.ReportLine, len(rep.Lines)), Total: reportLineDTO(rep.Total),
		Oversized: reportJobsDTO(rep.Oversized), NearMemory: reportJobsDTO(rep.NearMemory),
		Under: rep.Under, Near: rep.Near}
	for i, l := range rep.Lines {
		out.Lines[i] = reportLineDTO(l)
	}
	return out
}

func reportLineDTO(l service.ReviewLine) apitypes.ReportLine {
	out := apitypes.ReportLine{Group: l.Group, Submitted: l.Submitted,
		Queue: apitypes.QueueTimes{N: l.Queue.N, P50: l.Queue.P50.Seconds(), P90: l.Queue.P90.Seconds(),
			P99: l.Queue.P99.Seconds(), Max: l.Queue.Max.Seconds()},
		Started: l.Started, Retries: l.Retries, Ended: l.Ended, Succeeded: l.Succeeded, Preempted: l.Preempted,
		Failed: l.Failed, FailureRate: l.FailureRate(), Failures: make([]apitypes.ReasonCount, len(l.Failures)),
		GPUHours: l.GPUHours, CPUHours: l.CPUHours, GPUHoursUsed: l.GPUHoursUsed, CPUHoursUsed: l.CPUHoursUsed,
		CapacityGPUHours: l.CapacityGPUHours, CapacityCPUHours: l.CapacityCPUHours,
		Cost: l.Cost.String(), Waste: l.Waste.String(), Storage: l.Storage.String()}
	for i, f := range l.Failures {
		out.Failures[i] = apitypes.ReasonCount{State: string(f.State), Reason: string(f.Reason), N: f.N}
	}
	if b := l.Budget; b != nil {
		out.Budget = &apitypes.ReportBudget{Period: b.Use.Period, Amount: b.Budget.Amount.String(),
			Spent: b.Use.Spent.String(), PeriodStart: b.Use.From, PeriodEnd: b.Use.To}
	}
	return out
}

func reportJobsDTO(js []service.ReviewJob) []apitypes.ReportJob {
	out := make([]apitypes.ReportJob, len(js))
	for i, j := range js {
		out[i] = apitypes.ReportJob{ID: j.JobID, Name: j.Name, Project: j.Project, Pool: j.Pool, User: j.Submitter,
			CPUs: j.Resources.CPUs, Memory: int64(j.Resources.Memory), HeldHours: j.Held.Hours(), UsedCPUs: j.UsedCPUs,
			MaxRSS: int64(j.MaxRSS), IdleCost: j.IdleCost.String()}
	}
	return out
}
