package kubernetes

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/executor/kubernetes/kubetest"
)

// benchJobs is how many jobs a round runs; TRAINYARD_BENCH_JOBS changes it.
func benchJobs() int {
	if n, err := strconv.Atoi(os.Getenv("TRAINYARD_BENCH_JOBS")); err == nil && n > 0 {
		return n
	}
	return 1000
}

// benchClients is how many goroutines create Jobs at once, on both sides.
const benchClients = 8

// benchNodes adds four kwok nodes of cpus CPUs that take 1,000 pods each,
// labelled for this benchmark alone, and returns their selector.
func benchNodes(b *testing.B, c *kubetest.Cluster, name, cpus string) map[string]string {
	sel := map[string]string{"trainyard.io/bench": name}
	for i := range 4 {
		c.AddNode(b, kubetest.Node{Name: name + "-" + strconv.Itoa(i), CPUs: cpus, Memory: "4Ti", Pods: "1000", Labels: sel})
	}
	return sel
}

// benchLaunch is job i's first attempt, its directory and log below root.
func benchLaunch(root string, i int) executor.Launch {
	dir := filepath.Join(root, strconv.Itoa(i+1), "1")
	return executor.Launch{Ref: executor.Ref{JobID: int64(i + 1), Attempt: 1}, Project: "bench", Pool: "k8s",
		Argv: []string{"true"}, Resources: domain.Resources{CPUs: 1, Memory: 64 << 20, Nodes: 1},
		Dir: dir, LogPath: filepath.Join(dir, "output.log")}
}

// BenchmarkThousandJobs runs 1,000 one-pod jobs that end at once on kwok
// nodes, each round three times, alternating, each round starting with
// another of the three: directly, as a minimal
// client-go loop would (create the Jobs the executor would create, then
// wait until an informer has seen every one Complete); as that loop with
// the two duties no executor that keeps its pods' logs can skip, done as
// simply as client-go allows (a pods informer, and one log request per
// pod once it has succeeded, read to its end); and through the executor
// (Launch each, then wait for every Exited event). All create from 8
// goroutines with the same client limits, each round in a namespace of
// its own. It reports each side's jobs per second, created to completed,
// and the executor's as a fraction of direct's (Trainyard may add at most
// 10%: ≥ 0.9) and of the duties loop's (what the executor adds over the
// API work it has to ask for).
func BenchmarkThousandJobs(b *testing.B) {
	c := kubetest.Shared(b)
	sel := benchNodes(b, c, "bench-throughput", "64")
	n := benchJobs()
	var direct, duties, via []float64
	var directCPU, dutiesCPU, viaCPU executortest.CPU
	var reqs requestCount
	// Each round leaves its 1,000 Jobs and pods in the cluster, which the
	// control plane and kwok keep watching, so a side run later in a round
	// works against more objects: each round starts with another side.
	sides := []func(){
		func() { direct = append(direct, float64(n)/directRound(b, c, sel, n, false).Seconds()) },
		func() { duties = append(duties, float64(n)/directRound(b, c, sel, n, true).Seconds()) },
		func() { via = append(via, float64(n)/executorRound(b, c, sel, n, &reqs).Seconds()) },
	}
	cpus := []*executortest.CPU{&directCPU, &dutiesCPU, &viaCPU}
	for round := 0; b.Loop(); round++ {
		for i := range sides {
			side := (round + i) % len(sides)
			cpu0 := executortest.CPUNow(c.Dir)
			sides[side]()
			cpus[side].Add(executortest.CPUNow(c.Dir).Sub(cpu0))
		}
	}
	d, u, v := median(direct), median(duties), median(via)
	b.ReportMetric(d, "direct-jobs/s")
	b.ReportMetric(u, "duties-jobs/s")
	b.ReportMetric(v, "executor-jobs/s")
	b.ReportMetric(v/d, "executor/direct")
	b.ReportMetric(v/u, "executor/duties")
	jobs := float64(n * len(direct))
	b.ReportMetric(float64(directCPU.Total())/jobs, "direct-cpu-ms/job")
	b.ReportMetric(float64(dutiesCPU.Total())/jobs, "duties-cpu-ms/job")
	b.ReportMetric(float64(viaCPU.Total())/jobs, "executor-cpu-ms/job")
	b.ReportMetric(float64(reqs.logs())/jobs, "log-requests/pod")
	b.ReportMetric(float64(reqs.total())/jobs, "requests/job")
	b.ReportMetric(0, "ns/op")
	b.Logf("jobs/s per round: direct %.1f, direct with the duties %.1f, executor %.1f", direct, duties, via)
	b.Logf("CPU ms per job, direct: %s", directCPU.PerJob(jobs, false))
	b.Logf("CPU ms per job, direct with the duties: %s", dutiesCPU.PerJob(jobs, false))
	b.Logf("CPU ms per job, executor: %s", viaCPU.PerJob(jobs, false))
	b.Logf("the executor's requests per job: %s; log streams open %.0f ms each on average", reqs.per(jobs), reqs.logOpenMS())
}

// directRound creates n Jobs as the executor would and waits until a Jobs
// informer has seen every one Complete. With duties it also does what an
// executor must that keeps its pods' logs: a pods informer, and one log
// request per pod that has succeeded (with timestamps, as the executor
// asks), read to its end before the round ends.
func directRound(b *testing.B, c *kubetest.Cluster, sel map[string]string, n int, duties bool) time.Duration {
	ns := c.Namespace(b)
	cs := c.Client(b)
	root := b.TempDir()
	cfg := Config{Namespace: ns, Image: "example.com/bench:1", NodeSelector: sel}
	var complete atomic.Int64
	seen := sync.Map{}
	done := make(chan struct{})
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := f.Batch().V1().Jobs().Informer()
	count := func(obj any) {
		j, ok := obj.(*batchv1.Job)
		if !ok {
			return
		}
		for _, cond := range j.Status.Conditions {
			if cond.Type == batchv1.JobComplete && cond.Status == corev1.ConditionTrue {
				if _, dup := seen.LoadOrStore(j.Name, true); !dup && complete.Add(1) == int64(n) {
					close(done)
				}
			}
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: count, UpdateFunc: func(_, o any) { count(o) }})
	synced := []cache.InformerSynced{inf.HasSynced}
	var read sync.Map
	var logsRead atomic.Int64
	logged := make(chan struct{}) // every pod's log read
	if !duties {
		close(logged)
	} else {
		pods := f.Core().V1().Pods().Informer()
		readLog := func(obj any) {
			p, ok := obj.(*corev1.Pod)
			if !ok || p.Status.Phase != corev1.PodSucceeded {
				return
			}
			if _, dup := read.LoadOrStore(p.Name, true); dup {
				return
			}
			go func() {
				defer func() {
					if logsRead.Add(1) == int64(n) {
						close(logged)
					}
				}()
				r, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Timestamps: true}).Stream(context.Background())
				if err != nil {
					b.Errorf("log of pod %s: %v", p.Name, err)
					return
				}
				defer r.Close()
				if _, err := io.Copy(io.Discard, r); err != nil {
					b.Errorf("log of pod %s: %v", p.Name, err)
				}
			}()
		}
		_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: readLog, UpdateFunc: func(_, o any) { readLog(o) }})
		synced = append(synced, pods.HasSynced)
	}
	stop := make(chan struct{})
	defer close(stop)
	f.Start(stop)
	cache.WaitForCacheSync(stop, synced...)

	start := time.Now()
	each(n, func(i int) {
		job := build(cfg, benchLaunch(root, i)).job
		if _, err := cs.BatchV1().Jobs(ns).Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
			b.Error(err)
		}
	})
	wait(b, done, "every Job to complete")
	wait(b, logged, "every pod's log to be read")
	return time.Since(start)
}

func executorRound(b *testing.B, c *kubetest.Cluster, sel map[string]string, n int, reqs *requestCount) time.Duration {
	ns := c.Namespace(b)
	root := b.TempDir()
	cfg := rest.CopyConfig(c.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{rt: rt, count: reqs} })
	ex, err := New(context.Background(), Config{REST: cfg, Namespace: ns, Image: "example.com/bench:1", NodeSelector: sel})
	if err != nil {
		b.Fatal(err)
	}
	defer ex.Close()
	done := make(chan struct{})
	go func() {
		exited := 0
		for ev := range ex.Events() {
			if ev.Kind == executor.Exited || ev.Kind == executor.Lost {
				if ev.State != domain.AttemptSucceeded {
					b.Errorf("attempt %s: %s %s", ev.Ref, ev.State, ev.Message)
				}
				if exited++; exited == n {
					close(done)
					return
				}
			}
		}
	}()
	start := time.Now()
	each(n, func(i int) {
		if err := ex.Launch(context.Background(), benchLaunch(root, i)); err != nil {
			b.Error(err)
		}
	})
	wait(b, done, "every attempt to exit")
	return time.Since(start)
}

// BenchmarkLiveAttempts launches 1,000 one-CPU attempts that keep running
// (on 1,024 CPUs) and reports the memory the executor holds for them: the
// Go heap in use and the process's resident set, each above what it was
// before the executor started, its informers included (one set, however
// many attempts), and the process's goroutines.
func BenchmarkLiveAttempts(b *testing.B) {
	c := kubetest.Shared(b)
	sel := benchNodes(b, c, "bench-live", "256") // room for every attempt at once
	n := benchJobs()
	for b.Loop() {
		ns := c.Namespace(b)
		root := b.TempDir()
		runtime.GC()
		heap0, rss0 := heapInUse(), rss()
		ex, err := New(context.Background(), Config{REST: c.Config, Namespace: ns, Image: "example.com/bench:1", NodeSelector: sel})
		if err != nil {
			b.Fatal(err)
		}
		started := make(chan struct{})
		go func() {
			k := 0
			for ev := range ex.Events() {
				if ev.Kind == executor.Started {
					if k++; k == n {
						close(started)
					}
				}
			}
		}()
		each(n, func(i int) {
			l := benchLaunch(root, i)
			l.Env = []string{"TRAINYARD_KWOK_BLOCK=1"}
			if err := ex.Launch(context.Background(), l); err != nil {
				b.Error(err)
			}
		})
		wait(b, started, "every attempt to start")
		runtime.GC()
		b.ReportMetric(float64(heapInUse()-heap0)/(1<<20), "heap-MiB")
		b.ReportMetric(float64(rss()-rss0)/(1<<20), "rss-MiB")
		b.ReportMetric(float64(runtime.NumGoroutine()), "goroutines")
		_ = ex.Close()
	}
	b.ReportMetric(0, "ns/op")
}

func each(n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range benchClients {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		})
	}
	wg.Wait()
}

func wait(b *testing.B, done <-chan struct{}, what string) {
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		b.Fatalf("timed out waiting for %s", what)
	}
}

func heapInUse() int64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// rss is the process's resident set, from /proc/self/status.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// requestCount counts the requests a client made, by verb and resource
// ("POST jobs", "GET pods/log", "GET pods/log (follow)", "WATCH pods"),
// and how long the pods/log streams it opened stayed open.
type requestCount struct {
	mu      sync.Mutex
	n       map[string]int
	logOpen time.Duration
}

func (r *requestCount) add(kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[kind]++
}

func (r *requestCount) logs() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n["GET pods/log"] + r.n["GET pods/log (follow)"]
}

func (r *requestCount) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := 0
	for _, v := range r.n {
		t += v
	}
	return t
}

func (r *requestCount) logOpenMS() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.n["GET pods/log"] + r.n["GET pods/log (follow)"]
	if n == 0 {
		return 0
	}
	return float64(r.logOpen.Milliseconds()) / float64(n)
}

func (r *requestCount) per(jobs float64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var parts []string
	for k, v := range r.n {
		parts = append(parts, fmt.Sprintf("%s %.3f", k, float64(v)/jobs))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// countingTransport counts the requests that pass through it.
type countingTransport struct {
	rt    http.RoundTripper
	count *requestCount
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	kind := requestKind(req)
	t.count.add(kind)
	start := time.Now()
	resp, err := t.rt.RoundTrip(req)
	if err == nil && strings.HasPrefix(kind, "GET pods/log") {
		resp.Body = &timedBody{ReadCloser: resp.Body, done: func() {
			t.count.mu.Lock()
			t.count.logOpen += time.Since(start)
			t.count.mu.Unlock()
		}}
	}
	return resp, err
}

// timedBody calls done once, when it is closed.
type timedBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *timedBody) Close() error {
	b.once.Do(b.done)
	return b.ReadCloser.Close()
}

// requestKind names a request by verb and resource: /api/v1/namespaces/x/pods/p/log
// is "GET pods/log", a list "LIST pods", a watch "WATCH pods".
func requestKind(req *http.Request) string {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	if len(parts) > 0 && parts[0] == "apis" && len(parts) > 3 {
		parts = parts[3:]
	} else if len(parts) > 2 {
		parts = parts[2:]
	}
	if len(parts) > 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	res := strings.Join(parts[:min(len(parts), 1)], "")
	if len(parts) >= 3 {
		res += "/" + parts[2]
	}
	verb := req.Method
	switch {
	case req.URL.Query().Get("watch") == "true":
		verb = "WATCH"
	case verb == "GET" && len(parts) == 1:
		verb = "LIST"
	}
	if res == "pods/log" && req.URL.Query().Get("follow") == "true" {
		res += " (follow)"
	}
	return verb + " " + res
}
