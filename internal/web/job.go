package web

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"

	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// jobStatus is the live part of a job's page: where it stands, why, what
// it costs, its attempts and its history, and what the viewer may do.
type jobStatus struct {
	Job         *domain.Job
	Resources   string
	Duration    string
	Cost        string
	CostPerHour string
	Why         service.Why
	Attempts    []domain.Attempt
	Events      []domain.Event
	Actions     []string // "cancel", "hold", "release", "rerun"
	CSRF        string
	RerunKey    string
}

// jobData is a job's page.
type jobData struct {
	Status jobStatus
	Spec   string // the config snapshot, indented
	// Sweep and SweepIndex are the sweep a member belongs to and its
	// index ("" for other jobs).
	Sweep, SweepIndex string
	Lineage           *domain.Lineage
	Files             []domain.ArtifactFile
	FilesNote         string
	Ckpts             []domain.CheckpointRecord
	Grep              string
	LogSrc            string
	Charts            template.HTML // drawn by svgChart from numbers and escaped names
}

func jobID(r *http.Request) (int64, error) {
	v := r.PathValue("id")
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id <= 0 {
		return 0, domain.Errorf(domain.ErrNotFound, "there is no job %q: job ids are whole numbers; see the job list", v)
	}
	return id, nil
}

// status reads the live part of job id's page; d is the job as Show
// gave it.
func (h *handler) status(r *http.Request, v *viewer, d service.JobDetail) (jobStatus, error) {
	why, err := h.svc.Jobs.Explain(r.Context(), v.p, d.Job.ID)
	if err != nil {
		return jobStatus{}, err
	}
	j := &d.Job
	st := jobStatus{Job: j, Resources: resources(j.Resources), Duration: jobDuration(j), Why: why,
		Attempts: d.Attempts, Events: d.Events, CSRF: v.csrf}
	if d.Priced {
		st.Cost = d.Cost.String() + " " + h.cfg.Currency
		if d.CostPerHour != 0 {
			st.CostPerHour = d.CostPerHour.String() + " " + h.cfg.Currency + "/h"
		}
	}
	for _, a := range []string{"cancel", "hold", "release", "rerun"} {
		if v.CanJob(a, j) {
			st.Actions = append(st.Actions, a)
		}
	}
	if j.CancelRequested && len(st.Actions) > 0 && st.Actions[0] == "cancel" {
		st.Actions = st.Actions[1:] // asked already
	}
	// Newest first: the latest attempt and event are what one looks for.
	sort.SliceStable(st.Attempts, func(a, b int) bool { return st.Attempts[a].Number > st.Attempts[b].Number })
	sort.SliceStable(st.Events, func(a, b int) bool { return st.Events[a].ID > st.Events[b].ID })
	st.RerunKey = newKey()
	return st, nil
}

// newKey is a random idempotency key for a form, so that a double click
// re-runs a job once.
func newKey() string {
	var b [12]byte
	rand.Read(b[:])
	return "web-" + hex.EncodeToString(b[:])
}

func (h *handler) job(w http.ResponseWriter, r *http.Request, v *viewer) {
	id, err := jobID(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	detail, err := h.svc.Jobs.Show(r.Context(), v.p, id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	st, err := h.status(r, v, detail)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d := jobData{Status: st, Grep: r.URL.Query().Get("grep")}
	var spec bytes.Buffer // why read the job's snapshot already
	if json.Indent(&spec, st.Why.Job.SpecJSON, "", "  ") == nil {
		d.Spec = spec.String()
	}
	d.Sweep, d.SweepIndex = st.Why.Job.Spec.Labels[domain.SweepLabel], st.Why.Job.Spec.Labels[domain.ArrayIndexLabel]
	if m, err := h.svc.Artifacts.Manifest(r.Context(), v.p, id, 0); err == nil {
		d.Files, d.Lineage = m.Files, &m.Lineage
	} else if errors.Is(err, domain.ErrNotFound) {
		d.FilesNote = "No outputs yet: they are listed when an attempt ends."
	} else {
		d.FilesNote = "Outputs cannot be listed: " + err.Error()
	}
	if cs, err := h.svc.Artifacts.Checkpoints(r.Context(), v.p, id); err == nil {
		d.Ckpts = cs
	}
	lq := url.Values{"tail": {"500"}}
	if d.Grep != "" {
		lq.Set("grep", d.Grep)
	}
	d.LogSrc = fmt.Sprintf("/jobs/%d/log?%s", id, lq.Encode())
	if charts, err := h.charts(r, v, id); err == nil {
		d.Charts = template.HTML(charts)
	}
	p := page{Title: fmt.Sprintf("Job %d · %s", id, st.Job.Name), Nav: "jobs", User: v, CSRF: v.csrf, Data: d}
	switch r.URL.Query().Get("done") {
	case "cancel":
		p.Flash = "Cancel requested: the job stops within its grace period."
	case "hold":
		p.Flash = "Held: the job stays queued until released."
	case "release":
		p.Flash = "Released: the job is back in the queue."
	}
	h.render(w, r, http.StatusOK, "job.html", p)
}

// jobLive sends the job's status whenever it changes.
func (h *handler) jobLive(w http.ResponseWriter, r *http.Request, v *viewer) {
	id, err := jobID(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	key := newKey()
	var ended, last string // an ended job's last revision, and its part
	h.live(w, r, func() (string, error) {
		d, err := h.svc.Jobs.Show(r.Context(), v.p, id)
		if err != nil {
			return "", err
		}
		// An ended job changes seldom, and its why reads its log: render
		// it again only when it was written.
		rev := fmt.Sprint(d.Job.UpdatedAt.UnixNano(), len(d.Events), len(d.Attempts))
		if d.Job.State.Terminal() && rev == ended {
			return last, nil
		}
		st, err := h.status(r, v, d)
		if err != nil {
			return "", err
		}
		st.RerunKey = key // one form, one key: unchanged status, unchanged part
		if last, err = h.fragment("job-status", st); err != nil {
			return "", err
		}
		if d.Job.State.Terminal() {
			ended = rev
		}
		return last, nil
	})
}

// jobCharts sends the job's charts whenever they change.
func (h *handler) jobCharts(w http.ResponseWriter, r *http.Request, v *viewer) {
	id, err := jobID(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	h.live(w, r, func() (string, error) { return h.charts(r, v, id) })
}

// chartPoints is how many points a chart's series holds at most.
const chartPoints = 300

// charts draws the job's training metrics, one chart per metric.
func (h *handler) charts(r *http.Request, v *viewer, id int64) (string, error) {
	ms, err := h.svc.Jobs.Metrics(r.Context(), v.p, id, "", chartPoints)
	if err != nil {
		return "", err
	}
	keys := make([]string, 0, len(ms))
	for k := range ms {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	if len(keys) == 0 {
		b.WriteString(`<p class="empty">No training metrics yet. A job reports them by printing lines such as <code>trainyard: {"step": 100, "loss": 0.53}</code>, or through the Python SDK (docs/spec.md, Progress).</p>`)
	}
	for _, k := range keys {
		pts := make([]point, len(ms[k]))
		for i, m := range ms[k] {
			pts[i] = point{X: float64(m.Step), Y: m.Value}
		}
		b.WriteString(`<figure class="chart-box">`)
		b.WriteString(string(svgChart(k, "step", nil, series{Name: k, Points: pts})))
		b.WriteString(`</figure>`)
	}
	if rc, err := h.resourceCharts(r, v, id); err == nil {
		b.WriteString(rc) // resources.go
	}
	return b.String(), nil
}

// logStream sends the job's log as events, one line each, following it
// while the attempt runs; an "end" event says no more lines come.
func (h *handler) logStream(w http.ResponseWriter, r *http.Request, v *viewer) {
	id, err := jobID(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	req := service.LogRequest{Follow: true, Tail: 500, Grep: q.Get("grep")}
	if n, err := strconv.Atoi(q.Get("tail")); err == nil && n >= 0 && n <= 10000 {
		req.Tail = n
	}
	stream, err := h.svc.Jobs.OpenLogs(r.Context(), v.p, id, req)
	if err != nil {
		if fl, ok := startStream(w); ok {
			_, msg := statusOf(err)
			writeEvent(w, "problem", msg)
			fl.Flush()
		}
		return
	}
	fl, ok := startStream(w)
	if !ok {
		return
	}
	lw := &lineEvents{w: w}
	if err := stream.Copy(r.Context(), lw, func() { lw.flush(); fl.Flush() }); err != nil && r.Context().Err() == nil {
		_, msg := statusOf(err)
		writeEvent(w, "problem", "the log stopped: "+msg)
	}
	lw.flush()
	writeEvent(w, "end", "")
	fl.Flush()
}

// lineEvents turns a log's bytes into one event per line; a line longer
// than maxLine is cut into several.
type lineEvents struct {
	w   io.Writer
	buf []byte
}

const maxLine = 16 << 10

func (l *lineEvents) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			if len(l.buf) < maxLine {
				return len(p), nil
			}
			i = maxLine
		}
		line := l.buf[:i]
		rest := l.buf[min(i+1, len(l.buf)):]
		if i == maxLine {
			rest = l.buf[i:]
		}
		if err := writeEvent(l.w, "", strings.ToValidUTF8(strings.TrimSuffix(string(line), "\r"), "\uFFFD")); err != nil {
			return 0, err
		}
		l.buf = append(l.buf[:0], rest...)
	}
}

// flush sends a partial last line.
func (l *lineEvents) flush() {
	if len(l.buf) > 0 {
		writeEvent(l.w, "", strings.ToValidUTF8(string(l.buf), "\uFFFD"))
		l.buf = l.buf[:0]
	}
}

// logDownload serves the whole log of the latest attempt (or ?attempt=N)
// as a file.
func (h *handler) logDownload(w http.ResponseWriter, r *http.Request, v *viewer) {
	id, err := jobID(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var req service.LogRequest
	if s := r.URL.Query().Get("attempt"); s != "" {
		if req.Attempt, err = strconv.Atoi(s); err != nil || req.Attempt < 1 {
			h.fail(w, r, domain.FieldErrors{{Path: "attempt", Message: fmt.Sprintf("must be an attempt number (1 or more), got %q", s)}})
			return
		}
	}
	stream, err := h.svc.Jobs.OpenLogs(r.Context(), v.p, id, req)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="job-%d-attempt-%d.log"`, id, stream.Attempt()))
	w.Header().Set("Cache-Control", "no-store")
	if err := stream.Copy(r.Context(), w, nil); err != nil && r.Context().Err() == nil {
		h.log.Warn("download log", "job", id, "err", err)
	}
}

// download serves one output file as an attachment.
func (h *handler) download(w http.ResponseWriter, r *http.Request, v *viewer) {
	id, err := jobID(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	a, err := h.svc.Artifacts.OpenArtifact(r.Context(), v.p, id, r.PathValue("path"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	defer a.File.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", attachment(path.Base(a.Path)))
	w.Header().Set("X-Trainyard-SHA256", a.SHA256)
	w.Header().Set("Cache-Control", "no-store")
	http.ServeContent(w, r, "", a.File.ModTime, a.File.ReadSeekCloser)
}

// checkpoint serves one kept checkpoint as a tar archive.
func (h *handler) checkpoint(w http.ResponseWriter, r *http.Request, v *viewer) {
	id, err := jobID(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	name := r.PathValue("name")
	c, err := h.svc.Artifacts.OpenCheckpoint(r.Context(), v.p, id, name)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	defer c.Close()
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Content-Disposition", attachment(fmt.Sprintf("job-%d-%s.tar", id, name)))
	w.Header().Set("Cache-Control", "no-store")
	if err := c.WriteTar(r.Context(), w); err != nil {
		// Headers are sent: cut the stream so the browser sees a failed download.
		h.log.Warn("checkpoint download", "job", id, "checkpoint", name, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// attachment is a Content-Disposition that saves the answer as name,
// whatever characters a job put in it.
func attachment(name string) string {
	if v := mime.FormatMediaType("attachment", map[string]string{"filename": name}); v != "" {
		return v
	}
	return "attachment"
}

func (h *handler) cancel(w http.ResponseWriter, r *http.Request, v *viewer) {
	h.change(w, r, "cancel", func(id int64) error {
		_, err := h.svc.Jobs.Cancel(r.Context(), v.p, id, "canceled from the web page")
		return err
	})
}

func (h *handler) hold(w http.ResponseWriter, r *http.Request, v *viewer) {
	h.change(w, r, "hold", func(id int64) error {
		_, err := h.svc.Jobs.Hold(r.Context(), v.p, id, "held from the web page")
		return err
	})
}

func (h *handler) release(w http.ResponseWriter, r *http.Request, v *viewer) {
	h.change(w, r, "release", func(id int64) error {
		_, err := h.svc.Jobs.Release(r.Context(), v.p, id)
		return err
	})
}

// change does one of a job's buttons and shows the job again.
func (h *handler) change(w http.ResponseWriter, r *http.Request, what string, do func(id int64) error) {
	id, err := jobID(r)
	if err == nil {
		err = do(id)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	http.Redirect(w, r, fmt.Sprintf("/jobs/%d?done=%s", id, what), http.StatusSeeOther)
}

// rerun submits the job again from its config snapshot and shows the new
// job.
func (h *handler) rerun(w http.ResponseWriter, r *http.Request, v *viewer) {
	id, err := jobID(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	key := r.PostFormValue("key")
	if len(key) > 64 {
		key = ""
	}
	job, _, err := h.svc.Jobs.Rerun(r.Context(), v.p, id, service.RerunInput{IdempotencyKey: key})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	http.Redirect(w, r, fmt.Sprintf("/jobs/%d", job.ID), http.StatusSeeOther)
}
