package kubernetes

import (
	"context"
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
	"k8s.io/client-go/tools/cache"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
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
// nodes, each round twice, alternating: directly, as a minimal client-go
// loop would (create the Jobs the executor would create, then wait until
// an informer has seen every one Complete), and through the executor
// (Launch each, then wait for every Exited event). Both create from 8
// goroutines with the same client limits, each round in a namespace of
// its own. It reports each side's jobs per second, created to completed,
// and the executor's as a fraction of direct's (Trainyard may add at
// most 10%: ≥ 0.9).
func BenchmarkThousandJobs(b *testing.B) {
	c := kubetest.Shared(b)
	sel := benchNodes(b, c, "bench-throughput", "64")
	n := benchJobs()
	var direct, via []float64
	for b.Loop() {
		direct = append(direct, float64(n)/directRound(b, c, sel, n).Seconds())
		via = append(via, float64(n)/executorRound(b, c, sel, n).Seconds())
	}
	d, v := median(direct), median(via)
	b.ReportMetric(d, "direct-jobs/s")
	b.ReportMetric(v, "executor-jobs/s")
	b.ReportMetric(v/d, "executor/direct")
	b.ReportMetric(0, "ns/op")
}

func directRound(b *testing.B, c *kubetest.Cluster, sel map[string]string, n int) time.Duration {
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
	stop := make(chan struct{})
	defer close(stop)
	f.Start(stop)
	cache.WaitForCacheSync(stop, inf.HasSynced)

	start := time.Now()
	each(n, func(i int) {
		job := build(cfg, benchLaunch(root, i)).job
		if _, err := cs.BatchV1().Jobs(ns).Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
			b.Error(err)
		}
	})
	wait(b, done, "every Job to complete")
	return time.Since(start)
}

func executorRound(b *testing.B, c *kubetest.Cluster, sel map[string]string, n int) time.Duration {
	ns := c.Namespace(b)
	root := b.TempDir()
	ex, err := New(context.Background(), Config{REST: c.Config, Namespace: ns, Image: "example.com/bench:1", NodeSelector: sel})
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
