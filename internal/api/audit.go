package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// auditRoutes serves the audit log: list, verify and export.
func (h *handler) auditRoutes(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/audit", h.auth(h.listAudit))
	mux.Handle("GET /api/v1/audit/verify", h.auth(h.verifyAudit))
	mux.Handle("POST /api/v1/audit/verify", h.auth(h.verifyAudit))
	mux.Handle("GET /api/v1/audit/witness", h.auth(h.auditWitness))
	mux.Handle("GET /api/v1/audit/export", h.auth(h.exportAudit))
}

func auditDTO(r domain.AuditRecord) apitypes.AuditRecord {
	return apitypes.AuditRecord{Seq: r.Seq, At: r.At, Actor: r.Actor, Action: r.Action, Target: r.Target,
		Before: r.Before, After: r.After, Result: r.Result, Detail: r.Detail, Client: r.Client,
		PrevHash: r.PrevHash, Hash: r.Hash}
}

// afterParam parses ?after=, a record number (0 when absent).
func afterParam(r *http.Request, errs *domain.FieldErrors) int64 {
	v := r.URL.Query().Get("after")
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		errs.Add("after", "must be a record number (0 or more), got %q", v)
	}
	return n
}

// listAudit serves GET /api/v1/audit?actor=&action=&target=&since=&after=&limit=.
func (h *handler) listAudit(w http.ResponseWriter, r *http.Request, p service.Principal) {
	q := r.URL.Query()
	var errs domain.FieldErrors
	aq := service.AuditQuery{Actor: q.Get("actor"), Action: q.Get("action"), Target: q.Get("target")}
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			errs.Add("since", "must be a time such as 2025-06-01T12:00:00Z, got %q", v)
		}
		aq.Since = t
	}
	aq.AfterSeq = afterParam(r, &errs)
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			errs.Add("limit", "must be a whole number, got %q", v)
		}
		aq.Limit = n
	}
	if err := errs.Err(); err != nil {
		h.writeError(w, r, err)
		return
	}
	recs, more, err := h.svc.Audit.ListAudit(r.Context(), p, aq)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.AuditList{Records: make([]apitypes.AuditRecord, len(recs))}
	for i, rec := range recs {
		out.Records[i] = auditDTO(rec)
	}
	if more {
		out.NextAfter = recs[len(recs)-1].Seq
	}
	writeJSON(w, http.StatusOK, out)
}

// verifyAudit serves GET /api/v1/audit/verify, and POST with a witness the
// caller kept ({"witness": <the witness file>}). A broken chain, or a log
// or witness behind a witness, is a successful answer whose body says what
// broke.
func (h *handler) verifyAudit(w http.ResponseWriter, r *http.Request, p service.Principal) {
	var req apitypes.AuditVerifyRequest
	if r.Method == http.MethodPost {
		if err := decodeBody(w, r, &req); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	rep, err := h.svc.Audit.VerifyAudit(r.Context(), p, req.Witness)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.AuditVerification{OK: rep.OK(), Records: rep.Records, LastSeq: rep.LastSeq, LastHash: rep.LastHash}
	if pr := rep.Problem; pr != nil {
		out.Problem = &apitypes.AuditProblem{Kind: string(pr.Kind), Seq: pr.Seq, Other: pr.Other, Message: pr.Message}
	}
	if wt := rep.Witness; wt != nil {
		out.Witness = &apitypes.AuditWitnessHead{Seq: wt.Seq, Hash: wt.Hash, At: wt.At, WrittenAt: wt.WrittenAt}
	}
	writeJSON(w, http.StatusOK, out)
}

// auditWitness serves GET /api/v1/audit/witness: the server's witness file
// as it is, to keep elsewhere and give back to POST /api/v1/audit/verify.
func (h *handler) auditWitness(w http.ResponseWriter, r *http.Request, p service.Principal) {
	b, err := h.svc.Audit.AuditWitness(r.Context(), p)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// exportAudit serves GET /api/v1/audit/export[?after=N]: every record as
// one JSON object per line (application/x-ndjson), streamed. A failure after
// the first line aborts the response, so a cut-off export never looks
// complete.
func (h *handler) exportAudit(w http.ResponseWriter, r *http.Request, p service.Principal) {
	var errs domain.FieldErrors
	after := afterParam(r, &errs)
	if err := errs.Err(); err != nil {
		h.writeError(w, r, err)
		return
	}
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	started := false
	n := 0
	err := h.svc.Audit.ExportAudit(r.Context(), p, after, func(rec domain.AuditRecord) error {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		if err := enc.Encode(auditDTO(rec)); err != nil {
			return errors.Join(errClientGone, err)
		}
		if n++; n%1000 == 0 && flusher != nil {
			flusher.Flush()
		}
		return nil
	})
	switch {
	case err == nil && !started:
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
	case err != nil && !started:
		h.writeError(w, r, err)
	case err != nil:
		if !errors.Is(err, errClientGone) && r.Context().Err() == nil {
			h.log.Error("export audit log", "after", after, "written", n, "err", err)
		}
		panic(http.ErrAbortHandler)
	}
}

// errClientGone marks a write to a client that stopped reading.
var errClientGone = errors.New("the client stopped reading")
