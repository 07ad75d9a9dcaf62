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

// Each pod's log is read with one request, once its container has
// started. A container seen running for followAfter (Config.FollowAfter)
// is followed (one stream, follow=true, which the kubelet ends once the
// container has exited), so that its lines reach the attempt's log as
// they are written; one that exits sooner, or whose attempt ends first,
// is read with one plain GET, which ends at the end of its log. A stop,
// and a pod being deleted by Kubernetes itself (a deadline, an eviction),
// follow at once: the pods, and their logs, may be gone soon after. Most
// short pods thus cost one short request, not a stream held open. An ended attempt's
// readers read on until their requests end, until none has read a line
// for logIdle (a kubelet that keeps a stream open after the exit, as
// kwok's does), or for logGrace at most; then the outcome is reported.
// Once someone follows the attempt's log (Logs with Follow), its running
// pods are followed at once, and so are those that start after.
const (
	followAfter = 5 * time.Second
	logIdle     = time.Second
	logGrace    = time.Minute
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
	after  time.Duration // followAfter, or the executor's own

	mu      sync.Mutex
	live    bool                  // someone follows the log: follow running pods at once
	read    map[string]bool       // pods being or already read
	waiting map[string]waitingPod // running pods not yet followed (followAfter)
	reading int                   // readers still running
	drained chan struct{}         // closed when reading drops to 0 (made on demand)
	w       *logs.Writer          // opened at the first line
	last    time.Time             // the newest line already in the log (after a restart)
	err     error                 // the first write error
	active  time.Time             // when a reader last wrote or started
}

func newAttemptLog(parent context.Context, l executor.Launch, after time.Duration) *attemptLog {
	ctx, cancel := context.WithCancel(parent)
	a := &attemptLog{ctx: ctx, cancel: cancel, dir: l.Dir, path: l.LogPath, limit: l.LogLimit, after: after,
		multi: max(l.Resources.Nodes, 1) > 1, read: map[string]bool{}, waiting: map[string]waitingPod{}, last: lastLogTime(l.LogPath)}
	for _, v := range l.Redact {
		if len(v) >= 4 {
			a.redact = append(a.redact, []byte(v))
		}
	}
	return a
}

// waitingPod is a running pod whose log is to be followed once its
// timer fires.
type waitingPod struct {
	c     *client
	ns    string
	rank  int
	timer *time.Timer
}

// follow starts reading pod's log into the attempt's, once per pod, once
// its container has started: at once if it has exited, else after
// followAfter (see above). Called with the executor's lock held, whenever
// the attempt's pods change.
func (a *attemptLog) follow(c *client, p *corev1.Pod) {
	if !containerStarted(p) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.read[p.Name] || a.ctx.Err() != nil {
		return
	}
	name, ns, rank := p.Name, p.Namespace, rankOf(p)
	if containerExited(p) {
		a.readLocked(c, ns, name, rank, false)
		return
	}
	if a.live || p.DeletionTimestamp != nil {
		// Followed, or being deleted (a deadline, an eviction): its last
		// lines are wanted before the pod, and its log, are gone.
		a.readLocked(c, ns, name, rank, true)
		return
	}
	if _, ok := a.waiting[name]; !ok {
		a.waiting[name] = waitingPod{c: c, ns: ns, rank: rank, timer: time.AfterFunc(a.after, func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.readLocked(c, ns, name, rank, true)
		})}
	}
}

// goLive follows the running pods' logs at once, now and from now on:
// someone follows the attempt's log.
func (a *attemptLog) goLive() {
	a.mu.Lock()
	a.live = true
	a.mu.Unlock()
	a.followNow(true)
}

// followNow starts reading the pods still waiting for followAfter: live
// (a stop: their lines to come are wanted) or to the end of their logs
// (the attempt has ended).
func (a *attemptLog) followNow(live bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for name, w := range a.waiting {
		a.readLocked(w.c, w.ns, name, w.rank, live)
	}
}

// readLocked starts the one reader of pod's log, unless it has one or
// the attempt's readers were stopped; a.mu is held.
func (a *attemptLog) readLocked(c *client, ns, pod string, rank int, live bool) {
	if w, ok := a.waiting[pod]; ok {
		w.timer.Stop()
		delete(a.waiting, pod)
	}
	if a.read[pod] || a.ctx.Err() != nil {
		return
	}
	a.read[pod] = true
	a.active = time.Now()
	a.reading++
	go func() {
		defer a.readerDone()
		if err := a.copy(c, ns, pod, rank, live); err != nil && a.ctx.Err() == nil {
			a.system(time.Now(), "cannot read the log of pod "+pod+": "+err.Error())
		}
	}()
}

func (a *attemptLog) readerDone() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.reading--; a.reading == 0 && a.drained != nil {
		close(a.drained)
		a.drained = nil
	}
}

// allRead is closed once no reader is left.
func (a *attemptLog) allRead() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.reading == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	if a.drained == nil {
		a.drained = make(chan struct{})
	}
	return a.drained
}

// copy reads pod's log to its end (follow: until the stream ends, its
// container having exited, or the attempt's context does).
func (a *attemptLog) copy(c *client, ns, pod string, rank int, follow bool) error {
	opts := &corev1.PodLogOptions{Container: containerName, Follow: follow, Timestamps: true}
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

// finish waits for the readers to reach the end of their pods' logs
// (see logIdle and logGrace), stops them, and closes the log with a note
// of how the attempt ended.
func (a *attemptLog) finish(ev executor.Event) {
	a.followNow(false)
	read := a.allRead()
	deadline := time.Now().Add(logGrace)
	t := time.NewTimer(logIdle)
	defer t.Stop()
wait:
	for {
		a.mu.Lock()
		until := a.active.Add(logIdle)
		a.mu.Unlock()
		if until.After(deadline) {
			until = deadline
		}
		d := time.Until(until)
		if d <= 0 {
			break
		}
		t.Reset(d)
		select {
		case <-read:
			break wait
		case <-t.C:
		}
	}
	a.cancel()
	<-read
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

// stop ends the readers at once (the attempt is being launched again).
func (a *attemptLog) stop() {
	a.cancel()
	a.followNow(false) // a.ctx has ended: only drops the timers
	<-a.allRead()
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

// containerExited reports whether pod's job container has exited (its
// pod never restarts it).
func containerExited(p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == containerName && cs.State.Terminated != nil {
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
