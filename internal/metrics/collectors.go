package metrics

import (
	"context"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"trainyard/internal/domain"
	"trainyard/internal/metrics/sample"
)

var (
	queueDepthDesc = prometheus.NewDesc(QueueDepth, "Queued jobs waiting for the scheduler, as the control loop last saw them.", []string{"pool", "project"}, nil)
	runningDesc    = prometheus.NewDesc(RunningJobs, "Jobs with an active (starting or running) attempt, as the control loop last saw them.", []string{"pool", "project"}, nil)
	capGPUsDesc    = prometheus.NewDesc(PoolCapacityGPUs, "GPUs in the pool.", []string{"pool"}, nil)
	allocGPUsDesc  = prometheus.NewDesc(PoolAllocatedGPUs, "GPUs held by active attempts in the pool.", []string{"pool"}, nil)
	capCPUsDesc    = prometheus.NewDesc(PoolCapacityCPUs, "CPU cores in the pool.", []string{"pool"}, nil)
	allocCPUsDesc  = prometheus.NewDesc(PoolAllocatedCPUs, "CPU cores held by active attempts in the pool.", []string{"pool"}, nil)
	capMemDesc     = prometheus.NewDesc(PoolCapacityMemory, "Memory in the pool, in bytes.", []string{"pool"}, nil)
	allocMemDesc   = prometheus.NewDesc(PoolAllocatedMemory, "Memory held by active attempts in the pool, in bytes.", []string{"pool"}, nil)
	jobsDesc       = prometheus.NewDesc(Jobs, "Jobs by state, counted in the store at scrape time.", []string{"state"}, nil)
	spendRateDesc  = prometheus.NewDesc(SpendRate, "What the running attempts cost per hour at their pool's rates, in the server's currency, as the control loop last saw them.", []string{"pool", "project"}, nil)

	budgetAmountDesc    = prometheus.NewDesc(BudgetAmount, "A project's budget for its current period, in the server's currency.", []string{"project", "period"}, nil)
	budgetSpentDesc     = prometheus.NewDesc(BudgetSpent, "What a project's attempts cost so far in its budget's current period.", []string{"project", "period"}, nil)
	budgetCommittedDesc = prometheus.NewDesc(BudgetCommitted, "A project's spend in the period plus what its running attempts may still cost until their timeouts.", []string{"project", "period"}, nil)
	budgetUsedDesc      = prometheus.NewDesc(BudgetUsed, "A project's spend in the period over its budget (1 is the whole budget).", []string{"project", "period"}, nil)

	attemptLabels   = []string{"job", "attempt", "project", "pool"}
	gpuLabels       = append(append([]string{}, attemptLabels...), "gpu")
	cpuDesc         = prometheus.NewDesc(AttemptCPU, "CPU time (user+system) used so far by a running attempt's processes, in seconds.", attemptLabels, nil)
	rssDesc         = prometheus.NewDesc(AttemptRSS, "Resident memory of a running attempt (its process tree, or its memory cgroup), in bytes.", attemptLabels, nil)
	memLimitDesc    = prometheus.NewDesc(AttemptMemoryLimit, "Memory a running attempt requested (its limit where cgroups enforce it), in bytes.", attemptLabels, nil)
	procsDesc       = prometheus.NewDesc(AttemptProcesses, "Live processes of a running attempt.", attemptLabels, nil)
	gpuUtilDesc     = prometheus.NewDesc(AttemptGPUUtil, "Utilisation (0–1) of a GPU assigned to a running attempt.", gpuLabels, nil)
	gpuMemUsedDesc  = prometheus.NewDesc(AttemptGPUMemoryUsed, "Memory in use on a GPU assigned to a running attempt, in bytes.", gpuLabels, nil)
	gpuMemTotalDesc = prometheus.NewDesc(AttemptGPUMemory, "Memory of a GPU assigned to a running attempt, in bytes.", gpuLabels, nil)
	gpuTempDesc     = prometheus.NewDesc(AttemptGPUTemp, "Temperature of a GPU assigned to a running attempt, in degrees Celsius.", gpuLabels, nil)
)

// stateCollector emits the control loop's last view as gauges. Series of pools and
// projects that no longer have queued or running work disappear.
type stateCollector struct{ m *Metrics }

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{queueDepthDesc, runningDesc, spendRateDesc, capGPUsDesc, allocGPUsDesc, capCPUsDesc, allocCPUsDesc, capMemDesc, allocMemDesc} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	st := c.m.state
	for k, n := range st.queued {
		ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(n), k.Pool, k.Project)
	}
	for k, n := range st.running {
		ch <- prometheus.MustNewConstMetric(runningDesc, prometheus.GaugeValue, float64(n), k.pool, k.project)
	}
	for k, m := range st.spendRate {
		ch <- prometheus.MustNewConstMetric(spendRateDesc, prometheus.GaugeValue, units(m), k.pool, k.project)
	}
	for name, u := range st.pools {
		for _, v := range []struct {
			d *prometheus.Desc
			x float64
		}{
			{capGPUsDesc, float64(u.capacity.GPUs)}, {allocGPUsDesc, float64(u.allocated.GPUs)},
			{capCPUsDesc, u.capacity.CPUs}, {allocCPUsDesc, u.allocated.CPUs},
			{capMemDesc, float64(u.capacity.Memory)}, {allocMemDesc, float64(u.allocated.Memory)},
		} {
			ch <- prometheus.MustNewConstMetric(v.d, prometheus.GaugeValue, v.x, name)
		}
	}
}

// jobsCollector counts jobs by state in the store at scrape time.
type jobsCollector struct{ m *Metrics }

func (c jobsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- jobsDesc }

func (c jobsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := c.m.cfg.CountJobs(ctx)
	if err != nil {
		c.m.cfg.Logger.Warn("count jobs for metrics; trainyard_jobs is missing from this scrape", "err", err)
		return
	}
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(n), string(state))
	}
}

// sampleCollector emits the sampler's latest samples. Attempts that ended
// are gone from the next round, and so are their series.
type sampleCollector struct{ s *sample.Sampler }

func (c sampleCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{cpuDesc, rssDesc, memLimitDesc, procsDesc, gpuUtilDesc, gpuMemUsedDesc, gpuMemTotalDesc, gpuTempDesc} {
		ch <- d
	}
}

func (c sampleCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.s.Latest() {
		lv := []string{strconv.FormatInt(s.JobID, 10), strconv.Itoa(s.Attempt), s.Project, s.Pool}
		if s.MemoryLimit > 0 {
			ch <- prometheus.MustNewConstMetric(memLimitDesc, prometheus.GaugeValue, float64(s.MemoryLimit), lv...)
		}
		if !s.OK {
			continue
		}
		ch <- prometheus.MustNewConstMetric(cpuDesc, prometheus.CounterValue, s.CPUSeconds, lv...)
		ch <- prometheus.MustNewConstMetric(rssDesc, prometheus.GaugeValue, float64(s.RSSBytes), lv...)
		ch <- prometheus.MustNewConstMetric(procsDesc, prometheus.GaugeValue, float64(s.Processes), lv...)
		for _, g := range s.GPUs {
			glv := append(append([]string{}, lv...), strconv.Itoa(g.Index))
			if !math.IsNaN(g.Utilization) {
				ch <- prometheus.MustNewConstMetric(gpuUtilDesc, prometheus.GaugeValue, g.Utilization/100, glv...)
			}
			ch <- prometheus.MustNewConstMetric(gpuMemUsedDesc, prometheus.GaugeValue, float64(g.MemoryUsed), glv...)
			ch <- prometheus.MustNewConstMetric(gpuMemTotalDesc, prometheus.GaugeValue, float64(g.MemoryTotal), glv...)
			if !math.IsNaN(g.Temperature) {
				ch <- prometheus.MustNewConstMetric(gpuTempDesc, prometheus.GaugeValue, g.Temperature, glv...)
			}
		}
	}
}

// units is m in units of currency.
func units(m domain.Money) float64 { return float64(m) / float64(domain.MoneyUnit) }

// Budget is one project's budget in force, with its spend in the
// current period (Config.Budgets).
type Budget struct {
	Project, Period          string
	Amount, Spent, Committed domain.Money
}

// BudgetRefresh is how long the budget series are reused between scrapes:
// each reading prices the period's attempt history.
const BudgetRefresh = 30 * time.Second

// budgetCollector emits the projects' budgets and their use.
type budgetCollector struct {
	m    *Metrics
	mu   sync.Mutex
	at   time.Time
	last []Budget
}

func (c *budgetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{budgetAmountDesc, budgetSpentDesc, budgetCommittedDesc, budgetUsedDesc} {
		ch <- d
	}
}

func (c *budgetCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || time.Since(c.at) >= BudgetRefresh {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		bs, err := c.m.cfg.Budgets(ctx)
		cancel()
		if err != nil {
			c.m.cfg.Logger.Warn("read budgets for metrics; the budget series are from the last reading", "err", err)
		} else {
			c.at, c.last = time.Now(), bs
		}
	}
	for _, b := range c.last {
		ch <- prometheus.MustNewConstMetric(budgetAmountDesc, prometheus.GaugeValue, units(b.Amount), b.Project, b.Period)
		ch <- prometheus.MustNewConstMetric(budgetSpentDesc, prometheus.GaugeValue, units(b.Spent), b.Project, b.Period)
		ch <- prometheus.MustNewConstMetric(budgetCommittedDesc, prometheus.GaugeValue, units(b.Committed), b.Project, b.Period)
		if b.Amount > 0 {
			ch <- prometheus.MustNewConstMetric(budgetUsedDesc, prometheus.GaugeValue, float64(b.Spent)/float64(b.Amount), b.Project, b.Period)
		}
	}
}
