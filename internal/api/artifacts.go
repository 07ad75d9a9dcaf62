package api

import (
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// artifactRoutes serves jobs' outputs and checkpoints.
func (h *handler) artifactRoutes(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/jobs/{id}/artifacts", h.auth(h.manifest))
	mux.Handle("GET /api/v1/jobs/{id}/artifacts/{path...}", h.auth(h.artifact))
	mux.Handle("GET /api/v1/jobs/{id}/checkpoints", h.auth(h.checkpoints))
	mux.Handle("GET /api/v1/jobs/{id}/checkpoints/{name}/archive", h.auth(h.checkpointArchive))
	mux.Handle("POST /api/v1/jobs/{id}/attempts/{n}/checkpoints", h.auth(h.completeCheckpoint))
	mux.Handle("PUT /api/v1/jobs/{id}/attempts/{n}/outputs/{path...}", h.auth(h.putOutput))
	mux.Handle("POST /api/v1/jobs/{id}/attempts/{n}/resumed", h.auth(h.reportResumed))
	mux.Handle("GET /api/v1/checkpoints/usage", h.auth(h.checkpointUsage))
	mux.Handle("POST /api/v1/gc", h.auth(h.gc))
}

// gc serves POST /api/v1/gc {"dry_run": bool}.
func (h *handler) gc(w http.ResponseWriter, r *http.Request, p service.Principal) {
	var req apitypes.GCRequest
	if err := decodeBody(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	rep, err := h.svc.Artifacts.GC(r.Context(), p, req.DryRun)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.GCReport{DryRun: rep.DryRun, Bytes: rep.Bytes, Failed: rep.Failed, Deletions: make([]apitypes.GCDeletion, len(rep.Deletions))}
	for i, d := range rep.Deletions {
		out.Deletions[i] = apitypes.GCDeletion{Job: d.JobID, Kind: d.Kind, Path: d.Path, Bytes: d.Bytes, Reason: d.Reason}
	}
	writeJSON(w, http.StatusOK, out)
}

func lineageDTO(l domain.Lineage) apitypes.Lineage {
	out := apitypes.Lineage{Job: l.JobID, Attempt: l.Attempt, Name: l.Name, Project: l.Project, Submitter: l.Submitter,
		SpecHash: l.SpecHash, Env: l.Env, EnvDigest: l.EnvDigest, Code: l.Code, GitCommit: l.GitCommit, GitDirty: l.GitDirty,
		RerunOf: l.RerunOf, StartedAt: l.StartedAt, FinishedAt: l.FinishedAt, State: l.State}
	if r := l.ResumedFrom; r != nil {
		out.ResumedFrom = &apitypes.ResumedFrom{Job: r.Job, Checkpoint: r.Checkpoint}
	}
	for _, in := range l.Inputs {
		out.Inputs = append(out.Inputs, apitypes.Input{Name: in.Name, Path: in.Path, Version: in.Version, FromJob: in.FromJob})
	}
	return out
}

func checkpointDTO(c domain.CheckpointRecord) apitypes.Checkpoint {
	return apitypes.Checkpoint{Name: c.Name, Attempt: c.Attempt, Path: c.Path, Size: c.Size, Files: c.Files, At: c.At,
		SHA256: c.SHA256, ResumedBy: c.ResumedBy, SetAside: c.Suspect, Tier: c.Tier()}
}

// manifest serves GET /api/v1/jobs/{id}/artifacts[?attempt=N].
func (h *handler) manifest(w http.ResponseWriter, r *http.Request, p service.Principal) {
	id, err := pathID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	attempt := 0
	if v := r.URL.Query().Get("attempt"); v != "" {
		if attempt, err = strconv.Atoi(v); err != nil || attempt < 1 {
			h.writeError(w, r, domain.FieldErrors{{Path: "attempt", Message: strconv.Quote(v) + " is not an attempt number (1 or more)"}})
			return
		}
	}
	m, err := h.svc.Artifacts.Manifest(r.Context(), p, id, attempt)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.Manifest{Job: m.JobID, Attempt: m.Attempt, RecordedAt: m.At, Files: make([]apitypes.ArtifactFile, len(m.Files)), Lineage: lineageDTO(m.Lineage)}
	for i, f := range m.Files {
		out.Files[i] = apitypes.ArtifactFile{Path: f.Path, Size: f.Size, SHA256: f.SHA256}
		out.TotalBytes += f.Size
	}
	writeJSON(w, http.StatusOK, out)
}

// artifact serves GET /api/v1/jobs/{id}/artifacts/{path...}: one output
// file, with range requests; X-Trainyard-SHA256 carries the manifest's
// checksum for the client to verify.
func (h *handler) artifact(w http.ResponseWriter, r *http.Request, p service.Principal) {
	id, err := pathID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	a, err := h.svc.Artifacts.OpenArtifact(r.Context(), p, id, r.PathValue("path"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	defer a.File.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Trainyard-SHA256", a.SHA256)
	w.Header().Set("ETag", strconv.Quote("sha256:"+a.SHA256))
	// The executor's reader itself, not the OutputFile around it: when it
	// is a file on this machine, the copy to the connection can go without
	// user-space buffers (sendfile).
	http.ServeContent(w, r, "", a.File.ModTime, a.File.ReadSeekCloser)
}

// checkpoints serves GET /api/v1/jobs/{id}/checkpoints.
func (h *handler) checkpoints(w http.ResponseWriter, r *http.Request, p service.Principal) {
	id, err := pathID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	cs, err := h.svc.Artifacts.Checkpoints(r.Context(), p, id)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.CheckpointList{Job: id, Checkpoints: make([]apitypes.Checkpoint, len(cs))}
	for i, c := range cs {
		out.Checkpoints[i] = checkpointDTO(c)
		out.TotalBytes += c.Size
	}
	writeJSON(w, http.StatusOK, out)
}

// completeCheckpoint serves POST /api/v1/jobs/{id}/attempts/{n}/checkpoints
// {"name": DIR} with the attempt's job token.
func (h *handler) completeCheckpoint(w http.ResponseWriter, r *http.Request, p service.Principal) {
	id, n, err := pathAttempt(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var req apitypes.CheckpointComplete
	if err := decodeBody(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	c, err := h.svc.Artifacts.CompleteCheckpoint(r.Context(), p, id, n, req.Name)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, checkpointDTO(c))
}

// reportResumed serves POST /api/v1/jobs/{id}/attempts/{n}/resumed
// {"name": NAME, "note": WHY} with the attempt's job token: the in-job
// agent says which checkpoint it resumed from (service.ReportResumed). An
// attempt whose start the server has not recorded yet answers 409 with
// code "not_started": the agent reports again.
func (h *handler) reportResumed(w http.ResponseWriter, r *http.Request, p service.Principal) {
	id, n, err := pathAttempt(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var req apitypes.ResumeReport
	if err := decodeBody(w, r, &req); err != nil {
		h.writeError(w, r, err)
		return
	}
	rep, err := h.svc.Artifacts.ReportResumed(r.Context(), p, id, n, req.Name, req.Note)
	switch {
	case errors.Is(err, service.ErrAttemptNotStarted):
		writeErr(w, http.StatusConflict, "not_started", err.Error(), nil)
	case err != nil:
		h.writeError(w, r, err)
	default:
		writeJSON(w, http.StatusOK, apitypes.ResumeRecorded{Name: rep.Name, Message: rep.Words})
	}
}

// putOutput serves PUT /api/v1/jobs/{id}/attempts/{n}/outputs/{path...}
// with the attempt's job token: the body is the file's bytes, written at
// path below the job's output directory (service.PutOutput); 201 with its
// size and SHA-256.
func (h *handler) putOutput(w http.ResponseWriter, r *http.Request, p service.Principal) {
	id, n, err := pathAttempt(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	limit := h.svc.Artifacts.MaxUploadBytes()
	// Past the limit the server stops reading and closes the connection
	// after the answer, instead of draining what the client still sends.
	body := &uploadBody{r: http.MaxBytesReader(w, r.Body, limit)}
	u, err := h.svc.Artifacts.PutOutput(r.Context(), p, id, n, r.PathValue("path"), body, r.ContentLength)
	switch {
	case errors.Is(err, service.ErrUploadTooLarge):
		writeErr(w, http.StatusRequestEntityTooLarge, "too_large", err.Error(), nil)
	case errors.Is(err, service.ErrNoUploads):
		writeErr(w, http.StatusNotImplemented, "not_implemented", err.Error(), nil)
	case err != nil:
		h.writeError(w, r, err)
	default:
		writeJSON(w, http.StatusCreated, apitypes.OutputUpload{Path: u.Path, Size: u.Size, SHA256: u.SHA256})
	}
}

// uploadRoute matches the paths of uploads (PUT
// /api/v1/jobs/{id}/attempts/{n}/outputs/{path...}) up to the file's path.
var uploadRoute = regexp.MustCompile(`^/api/v1/jobs/[^/]+/attempts/[^/]+/outputs/`)

// uncleanUploads answers an upload whose file path is not clean ("..",
// ".", doubled slashes, NUL…; service.CheckUploadPath) with the field
// error the route gives any bad path. ServeMux would instead redirect
// the request to the cleaned path, which an uploading client does not
// follow (or follows with a GET), and could not tell what was wrong.
func (h *handler) uncleanUploads(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			if loc := uploadRoute.FindStringIndex(r.URL.Path); loc != nil {
				if err := service.CheckUploadPath(r.URL.Path[loc[1]:]); err != nil {
					h.writeError(w, r, err)
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// uploadBody is an upload's body that reports going past the limit of its
// http.MaxBytesReader as the service does (service.UploadTooLargeError).
type uploadBody struct{ r io.Reader }

func (b *uploadBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		err = &service.UploadTooLargeError{Size: -1, Limit: mbe.Limit}
	}
	return n, err
}

// checkpointUsage serves GET /api/v1/checkpoints/usage[?project=P].
func (h *handler) checkpointUsage(w http.ResponseWriter, r *http.Request, p service.Principal) {
	us, err := h.svc.Artifacts.CheckpointUsage(r.Context(), p, r.URL.Query().Get("project"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	out := apitypes.CheckpointUsageList{Jobs: make([]apitypes.CheckpointUsage, len(us)), Projects: map[string]int64{}}
	for i, u := range us {
		out.Jobs[i] = apitypes.CheckpointUsage{Job: u.JobID, Project: u.Project, Count: u.Count, Bytes: u.Bytes,
			LocalBytes: u.LocalBytes, ObjectBytes: u.ObjectBytes}
		out.Projects[u.Project] += u.Bytes
	}
	writeJSON(w, http.StatusOK, out)
}

// checkpointArchive serves GET /api/v1/jobs/{id}/checkpoints/{name}/archive:
// the checkpoint's files as an uncompressed tar stream, paths under NAME/.
func (h *handler) checkpointArchive(w http.ResponseWriter, r *http.Request, p service.Principal) {
	id, err := pathID(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	name := r.PathValue("name")
	c, err := h.svc.Artifacts.OpenCheckpoint(r.Context(), p, id, name)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	defer c.Close()
	w.Header().Set("Content-Type", "application/x-tar")
	err = c.WriteTar(r.Context(), w)
	if err != nil {
		// Headers are sent: cut the stream so the client sees a broken archive.
		h.log.Warn("checkpoint archive", "job", id, "checkpoint", name, "err", err)
		panic(http.ErrAbortHandler)
	}
}
