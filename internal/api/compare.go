package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// compareRoutes registers the comparison of jobs.
func (h *handler) compareRoutes(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/compare", h.auth(h.compare))
}

// compare answers GET /api/v1/compare?jobs=12,13: the ids are separated by
// commas, or the parameter repeated.
func (h *handler) compare(w http.ResponseWriter, r *http.Request, p service.Principal) {
	var ids []int64
	var errs domain.FieldErrors
	for _, v := range r.URL.Query()["jobs"] {
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			id, err := strconv.ParseInt(strings.TrimPrefix(s, "#"), 10, 64)
			if err != nil || id <= 0 {
				if len(errs) < 5 { // enough to fix a typo; a long list of junk is not echoed whole
					errs.Add("jobs", "%q is not a job id; ids are positive whole numbers, e.g. jobs=12,13", clipText(s, 40))
				}
				continue
			}
			ids = append(ids, id)
		}
	}
	if err := errs.Err(); err != nil {
		h.writeError(w, r, err)
		return
	}
	c, err := h.svc.Jobs.Compare(r.Context(), p, ids)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.Comparison{Jobs: make([]apitypes.ComparedJob, len(c.Jobs)), Differences: make([]apitypes.SpecDifference, len(c.Differences))}
	for i, cj := range c.Jobs {
		j := &cj.Job
		o := apitypes.ComparedJob{ID: j.ID, Name: j.Name, Project: j.Project, Pool: j.Pool, Submitter: j.Submitter,
			State: string(j.State), Reason: string(j.Reason), Env: j.Spec.Env, Code: codeDTO(j.Code), SpecHash: j.SpecHash,
			Attempts: j.Attempts, Started: timePtr(j.StartedAt), Finished: timePtr(j.FinishedAt),
			RunSeconds: cj.RunTime.Seconds(), Params: j.Spec.Params, Metrics: make([]apitypes.MetricSummary, len(cj.Metrics))}
		if cj.Priced {
			o.Cost, out.Currency = cj.Cost.String(), h.cfg.currency()
		}
		for k, m := range cj.Metrics {
			o.Metrics[k] = apitypes.MetricSummary{Key: m.Key, LastStep: m.LastStep, Last: m.Last, Min: m.Min, Max: m.Max}
		}
		out.Jobs[i] = o
	}
	for i, d := range c.Differences {
		vals := make([]json.RawMessage, len(d.Values))
		for k, v := range d.Values {
			if v == nil {
				v = json.RawMessage("null")
			}
			vals[k] = v
		}
		out.Differences[i] = apitypes.SpecDifference{Path: d.Path, Values: vals}
	}
	writeJSON(w, http.StatusOK, out)
}

// clipText is s cut to at most n bytes on a character boundary, with "…"
// when cut: enough of a bad value to recognise it in an error.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
