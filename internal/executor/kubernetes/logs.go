package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"trainyard/internal/executor"
	"trainyard/internal/logs"
)

// An ended attempt's followers read on until their streams end (the
// kubelet ends them once the container has exited), until none has read a
// line for logIdle, or for logGrace at most; then the outcome is reported.
const (
	logIdle  = time.Second
	logGrace = time.Minute
)

// maxLine bounds one log line; a longer one is cut there.
const maxLine = 1 << 20

// attemptLog copies the logs of an attempt's pods into its log
// (Launch.LogPath, in the logs package's format), so that they outlive
// the pods: the container's lines as stdout (the API gives both streams
// as one), secrets redacted, each pod's lines prefixed with its rank in a
// multi-node attempt.
type attemptLog struct {
	ctx    context.Context
	cancel context.CancelFunc
	dir    string
	path   string
	limit  int64
	redact [][]byte
	multi  bool

	wg sync.WaitGroup

	mu       sync.Mutex
	followed map[string]bool // pods being or already read
	w        *logs.Writer    // opened at the first line
	last     time.Time       // the newest line already in the log (after a restart)
	err      error           // the first write error
	active   time.Time       // when a follower last wrote or started
}

func newAttemptLog(parent context.Context, l executor.Launch) *attemptLog {
	ctx, cancel := context.WithCancel(parent)
	a := &attemptLog{ctx: ctx, cancel: cancel, dir: l.Dir, path: l.LogPath, limit: l.LogLimit,
		multi: max(l.Resources.Nodes, 1) > 1, followed: map[string]bool{}, last: lastLogTime(l.LogPath)}
	for _, v := range l.Redact {
		if len(v) >= 4 {
			a.redact = append(a.redact, []byte(v))
		}
	}
	return a
}

// follow starts reading pod's log into the attempt's, once per pod.
// Called with the executor's lock held.
func (a *attemptLog) follow(c *client, ns, pod string, rank int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.followed[pod] || a.ctx.Err() != nil {
		return
	}
	a.followed[pod] = true
	a.active = time.Now()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := a.copy(c, ns, pod, rank); err != nil && a.ctx.Err() == nil {
			a.system(time.Now(), "cannot read the log of pod "+pod+": "+err.Error())
		}
	}()
}

// copy streams pod's log until it ends (its container has exited) or the
// attempt's context does.
func (a *attemptLog) copy(c *client, ns, pod string, rank int) error {
	opts := &corev1.PodLogOptions{Container: containerName, Follow: true, Timestamps: true}
	if !a.last.IsZero() {
		since := metav1.NewTime(a.last)
		opts.SinceTime = &since
	}
	rc, err := c.podLog(a.ctx, ns, pod, opts)
	if err != nil {
		return err
	}
	defer rc.Close()
	prefix := ""
	if a.multi {
		prefix = "[rank " + strconv.Itoa(rank) + "] "
	}
	br := bufio.NewReaderSize(rc, 64<<10)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) <= maxLine {
			line = append(line, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if len(line) > 0 {
			t, text := splitTimestamp(bytes.TrimRight(line, "\r\n"))
			if a.last.IsZero() || t.After(a.last) {
				a.write(t, logs.Stdout, append([]byte(prefix), a.redacted(text)...))
			}
			line = line[:0]
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// splitTimestamp splits "<RFC 3339 time> <text>", as the API gives lines
// with timestamps; a line without one is timed now.
func splitTimestamp(line []byte) (time.Time, []byte) {
	if i := bytes.IndexByte(line, ' '); i > 0 {
		if t, err := time.Parse(time.RFC3339Nano, string(line[:i])); err == nil {
			return t, line[i+1:]
		}
	}
	return time.Now(), line
}

func (a *attemptLog) redacted(text []byte) []byte {
	for _, s := range a.redact {
		if bytes.Contains(text, s) {
			text = bytes.ReplaceAll(text, s, []byte("[redacted]"))
		}
	}
	return text
}

// system writes a note of the executor's own.
func (a *attemptLog) system(t time.Time, text string) { a.write(t, logs.System, []byte(text)) }

func (a *attemptLog) write(t time.Time, stream string, text []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return
	}
	if a.w == nil {
		if a.w, a.err = logs.Create(a.path, a.limit); a.err != nil {
			return
		}
	}
	_, a.err = a.w.Write(logs.AppendLine(nil, t, stream, text))
	a.active = time.Now()
}

// finish waits for the followers to reach the end of their pods' logs
// (see logIdle and logGrace), stops them, and closes the log with a note
// of how the attempt ended.
func (a *attemptLog) finish(ev executor.Event) {
	done := make(chan struct{})
	go func() {
		a.wg.Wait()
		close(done)
	}()
	deadline := time.Now().Add(logGrace)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case now := <-tick.C:
			a.mu.Lock()
			idle := now.Sub(a.active)
			a.mu.Unlock()
			if idle > logIdle || now.After(deadline) {
				a.cancel()
				<-done
				break wait
			}
		}
	}
	a.cancel()
	if ev.Message != "" {
		a.system(ev.At, ev.Message)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.w != nil {
		_ = a.w.Close()
		a.w = nil
	}
}

// stop ends the followers at once (the attempt is being launched again).
func (a *attemptLog) stop() {
	a.cancel()
	a.wg.Wait()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.w != nil {
		_ = a.w.Close()
		a.w = nil
	}
}

// lastLogTime is the time of the last line of the log at path: what a
// follower started after a restart skips up to. Zero when there is none.
func lastLogTime(path string) time.Time {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return time.Time{}
	}
	off := max(st.Size()-64<<10, 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return time.Time{}
	}
	b = bytes.TrimRight(b, "\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	if i := bytes.IndexByte(b, ' '); i > 0 {
		if t, err := time.Parse(time.RFC3339Nano, string(b[:i])); err == nil {
			return t
		}
	}
	return time.Time{}
}

// containerStarted reports whether pod's job container has run.
func containerStarted(p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == containerName && (cs.State.Running != nil || cs.State.Terminated != nil) {
			return true
		}
	}
	return false
}

// rankOf is a pod's node rank: its completion index (0 for a one-node
// attempt's pod).
func rankOf(p *corev1.Pod) int {
	n, _ := strconv.Atoi(p.Annotations[completionIndex])
	return n
}
