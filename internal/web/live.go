package web

import (
	"io"
	"net/http"
	"strings"
	"time"
)

// The live parts of a page (an element with data-live="URL") are kept
// current over Server-Sent Events: the server renders the part again
// every Config.Live and sends it when it changed; app.js puts it in
// place. A stream ends after liveMax, and the browser opens it again, so
// a long-open tab does not pin one request for ever. Its cost is one
// render per viewer and interval, whatever the number of jobs.

// liveMax is how long one live stream lasts.
const liveMax = 5 * time.Minute

// flusher flushes a response through any wrappers around it.
type flusher struct{ rc *http.ResponseController }

func (f flusher) Flush() { _ = f.rc.Flush() }

// startStream answers a request with an event stream, or false when the
// connection cannot stream.
func startStream(w http.ResponseWriter) (flusher, bool) {
	fl := flusher{http.NewResponseController(w)}
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no") // a proxy in front must not hold events back
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, "retry: 2000\n\n")
	return fl, fl.rc.Flush() == nil
}

// writeEvent writes one event: its type ("" for a plain message) and data,
// one data line per line.
func writeEvent(w io.Writer, event, data string) error {
	var b strings.Builder
	if event != "" {
		b.WriteString("event: " + event + "\n")
	}
	for _, line := range strings.Split(data, "\n") {
		b.WriteString("data: ")
		b.WriteString(strings.TrimSuffix(line, "\r"))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}

// live streams render's output whenever it changes. An error the viewer
// should see (a job they may no longer read) is sent as a "problem"
// event and ends the stream; others are logged and retried.
func (h *handler) live(w http.ResponseWriter, r *http.Request, render func() (string, error)) {
	fl, ok := startStream(w)
	if !ok {
		return
	}
	t := time.NewTicker(h.cfg.Live)
	defer t.Stop()
	end := time.NewTimer(liveMax)
	defer end.Stop()
	var last string
	for {
		s, err := render()
		switch {
		case err != nil && r.Context().Err() != nil:
			return
		case err != nil:
			status, msg := statusOf(err)
			if status >= 500 && status != http.StatusServiceUnavailable {
				h.log.Error("live update", "path", r.URL.Path, "err", err)
			}
			if status < 500 {
				writeEvent(w, "problem", msg)
				fl.Flush()
				return
			}
		case s != last:
			if writeEvent(w, "", s) != nil {
				return
			}
			fl.Flush()
			last = s
		}
		select {
		case <-r.Context().Done():
			return
		case <-end.C:
			writeEvent(w, "again", "")
			fl.Flush()
			return
		case <-t.C:
		}
	}
}
