package cli

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/client"
	"trainyard/internal/domain"
)

// maxGPURange bounds one "a-b" GPU range, so a typo cannot ask for millions
// of indices.
const maxGPURange = 1024

func (a *app) poolCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pool",
		Short: "List, show, create and change pools",
		Long: `A pool is a named slice of capacity (its nodes' CPUs, memory and GPUs) with
its own rules: the largest job it accepts, how many jobs may run at once,
which priority classes may use it, and whether borrowing and preemption are
allowed. See docs/pools.md.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.poolLsCmd(), a.poolShowCmd(), a.poolCreateCmd(), a.poolUpdateCmd())
	return cmd
}

func (a *app) poolLsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List pools",
		Long: `List pools as a table: NAME, NODES, GPUS, CPUS, MEMORY (the pool's
capacity), MAX RUNNING ("-" when uncapped), BORROWING, PREEMPTION and
GPU-HOUR (the rate per GPU-hour, in the server's currency; "-" when free;
pool show lists every rate).`,
		Example: `  trainyard pool ls
  trainyard pool ls -o yaml`,
		Args: exactArgs(0),
	}
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		pools, err := c.ListPools(cmd.Context())
		if err != nil {
			return err
		}
		if pools == nil {
			pools = []apitypes.Pool{}
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, apitypes.PoolList{Pools: pools}); ok {
			return err
		}
		if len(pools) == 0 {
			fmt.Fprintln(cmd.ErrOrStderr(), "no pools defined; create one with: trainyard pool create NAME --node name=n1,cpus=8,memory=32GiB,gpus=0-3")
			return nil
		}
		tw := newTable(out)
		fmt.Fprintln(tw, "NAME\tNODES\tGPUS\tCPUS\tMEMORY\tMAX RUNNING\tBORROWING\tPREEMPTION\tGPU-HOUR")
		for _, p := range pools {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(p.Name), len(p.Nodes), p.Capacity.GPUs,
				formatFloat(p.Capacity.CPUs), memText(p.Capacity.Memory), limit(p.MaxRunning), yesNo(p.Borrowing), yesNo(p.Preemption),
				cell(rateText(p.Rates.GPUHour, p.Rates.Currency)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, p := range pools {
			if p.BeyondHardware != "" {
				fmt.Fprintln(out, oneLine(poolHardwareNote(p)))
			}
			if p.Open {
				fmt.Fprintln(out, oneLine(openPoolNote(p)))
			}
		}
		return nil
	}
	return cmd
}

func (a *app) poolShowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a pool: its rules, nodes and quotas",
		Long: `Show a pool: its rules and capacity, its nodes, and the quotas projects hold
in it. -o json or -o yaml prints the pool as the API returns it (the form
PUT /api/v1/pools/NAME accepts).`,
		Example: `  trainyard pool show standard
  trainyard pool show standard -o yaml`,
		Args: exactArgs(1),
	}
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		p, err := c.GetPool(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, p); ok {
			return err
		}
		quotas, err := c.ListQuotas(cmd.Context(), "", p.Name)
		if err != nil {
			return err
		}
		a.showPool(out, p, quotas)
		return nil
	}
	return cmd
}

// showPool writes the human view of one pool.
func (a *app) showPool(w io.Writer, p apitypes.Pool, quotas []apitypes.Quota) {
	now := a.env.now()
	tw := newTable(w)
	kv := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, cell(v)) }
	kv("Name", p.Name)
	kv("Executor", p.Executor)
	kv("GPU type", p.GPUType)
	kv("Capacity", fmt.Sprintf("%d GPUs, %s CPUs, %s memory", p.Capacity.GPUs, formatFloat(p.Capacity.CPUs), memText(dash(p.Capacity.Memory))))
	if p.BeyondHardware != "" {
		kv("Hardware", poolHardwareNote(p))
	}
	if p.Open {
		kv("Quotas", "none: open to every project, shared by fair share (the first quota closes it)")
	}
	kv("Max GPUs per job", limit(p.MaxGPUsPerJob))
	kv("Max nodes per job", limit(p.MaxNodesPerJob))
	kv("Max timeout", dash(p.MaxTimeout))
	kv("Max running", limit(p.MaxRunning))
	logLimit := "the server's log_limit"
	if p.LogLimit != "" {
		logLimit = p.LogLimit + " per attempt (default and ceiling of policy.log_limit)"
	}
	kv("Log limit", logLimit)
	kv("Rates", ratesText(p.Rates))
	idle := "off"
	if s := p.IdleStop; s != nil {
		idle = fmt.Sprintf("stop jobs whose GPUs all stay under %s utilisation for %s (reason Idle, not retried)", percent(s.Below), s.For)
	}
	kv("Idle stop", idle)
	prios := "all"
	if len(p.Priorities) > 0 {
		prios = strings.Join(p.Priorities, ", ")
	}
	kv("Priorities", prios)
	kv("Borrowing", yesNo(p.Borrowing))
	kv("Preemption", yesNo(p.Preemption))
	kv("Created", timestamp(&p.CreatedAt)+" ("+age(now, p.CreatedAt)+" ago)")
	kv("Updated", timestamp(&p.UpdatedAt)+" ("+age(now, p.UpdatedAt)+" ago)")
	tw.Flush()

	fmt.Fprintln(w)
	fmt.Fprintln(w, "Nodes:")
	tw = newTable(w)
	fmt.Fprintln(tw, "  NAME\tCPUS\tMEMORY\tGPUS")
	for _, n := range p.Nodes {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", cell(n.Name), formatFloat(n.CPUs), memText(n.Memory), gpuList(n.GPUs))
	}
	tw.Flush()

	fmt.Fprintln(w)
	fmt.Fprintln(w, "Quotas:")
	if len(quotas) == 0 {
		if p.Borrowing {
			fmt.Fprintln(w, "  none: projects can only borrow idle capacity here")
		} else {
			fmt.Fprintln(w, "  none, and borrowing is off: no project can run jobs here until it gets a quota")
		}
		return
	}
	tw = newTable(w)
	fmt.Fprintln(tw, "  PROJECT\tGPUS\tCPUS\tMEMORY\tJOBS\tBORROW\tMAX PRIORITY")
	for _, q := range quotas {
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\t%s\n", cell(q.Project), q.GPUs, quotaCPUs(q.CPUs), quotaMemory(q.Memory),
			limit(q.Jobs), borrow(q.Borrow), maxPriority(q.MaxPriority))
	}
	tw.Flush()
}

// poolFlags are the flags of pool create and pool update.
type poolFlags struct {
	executor       string
	nodes          []string
	maxGPUsPerJob  int
	maxNodesPerJob int
	maxTimeout     string
	maxRunning     int
	priorities     []string
	borrowing      bool
	preemption     bool
	gpuType        string
	logLimit       string
	idleBelow      float64
	idleFor        string
	rates          [len(rateFlags)]string
}

// rateFlags are the pool flags that set one rate each, with what they
// price, in the order pool show lists them.
var rateFlags = [...]struct {
	name, unit string
	field      func(*apitypes.PoolRates) *apitypes.Amount
}{
	{"rate-gpu-hour", "GPU-hour", func(r *apitypes.PoolRates) *apitypes.Amount { return &r.GPUHour }},
	{"rate-cpu-hour", "CPU-hour", func(r *apitypes.PoolRates) *apitypes.Amount { return &r.CPUHour }},
	{"rate-memory-gib-hour", "GiB-hour of memory", func(r *apitypes.PoolRates) *apitypes.Amount { return &r.MemoryGiBHour }},
	{"rate-local-gib-month", "GiB-month stored locally", func(r *apitypes.PoolRates) *apitypes.Amount { return &r.LocalGiBMonth }},
	{"rate-object-gib-month", "GiB-month in object storage", func(r *apitypes.PoolRates) *apitypes.Amount { return &r.ObjectGiBMonth }},
}

// rateText is one rate with its currency, "-" when it is free.
func rateText(a apitypes.Amount, currency string) string {
	if a == "" {
		return "-"
	}
	return strings.TrimSpace(string(a) + " " + currency)
}

// applyIdleStop sets the pool's idle stop from its flags: --idle-stop-below
// 0 turns it off; otherwise each flag given replaces its half, and the
// server checks that both are there.
func (f *poolFlags) applyIdleStop(set func(string) bool, p *apitypes.Pool) error {
	if set("idle-stop-below") && f.idleBelow == 0 {
		if set("idle-stop-for") {
			return usageErrorf("--idle-stop-below 0 turns the idle stop off; leave out --idle-stop-for")
		}
		p.IdleStop = nil
		return nil
	}
	s := apitypes.PoolIdleStop{}
	if p.IdleStop != nil {
		s = *p.IdleStop
	}
	if set("idle-stop-below") {
		if !(f.idleBelow > 0 && f.idleBelow <= 1) {
			return usageErrorf("invalid --idle-stop-below %g: give a utilisation ratio in (0, 1], such as 0.05 for 5%%, or 0 to turn the idle stop off", f.idleBelow)
		}
		s.Below = f.idleBelow
	}
	if set("idle-stop-for") {
		d, err := domain.ParseDuration(strings.TrimSpace(f.idleFor))
		if err != nil || d <= 0 {
			return usageErrorf("invalid --idle-stop-for %q: give a duration such as 30m", f.idleFor)
		}
		s.For = domain.FormatDuration(d)
	}
	switch {
	case s.Below == 0:
		return usageErrorf("--idle-stop-for needs --idle-stop-below, e.g. --idle-stop-below 0.05 --idle-stop-for %s", orText(s.For, "30m"))
	case s.For == "":
		return usageErrorf("--idle-stop-below needs --idle-stop-for, e.g. --idle-stop-below %g --idle-stop-for 30m", s.Below)
	}
	p.IdleStop = &s
	return nil
}

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// ratesText lists a pool's rates for pool show.
func ratesText(r apitypes.PoolRates) string {
	var parts []string
	for _, rf := range rateFlags {
		if a := *rf.field(&r); a != "" {
			parts = append(parts, rateText(a, r.Currency)+" per "+rf.unit)
		}
	}
	if len(parts) == 0 {
		return "none: using the pool is free"
	}
	return strings.Join(parts, ", ")
}

func (f *poolFlags) register(cmd *cobra.Command, update bool) {
	nodeHelp := "a node, as name=N,cpus=C,memory=M,gpus=G (gpus: indices and ranges, e.g. 0-3 or 0,2); repeat for more nodes"
	if update {
		nodeHelp += "; replaces every node of the pool"
	}
	fl := cmd.Flags()
	fl.StringVar(&f.executor, "executor", "", "where the pool's jobs run: local (this machine, the default) or an executor the server config declares, e.g. a Kubernetes cluster, whose nodes the pool then has")
	fl.StringArrayVar(&f.nodes, "node", nil, nodeHelp)
	fl.IntVar(&f.maxGPUsPerJob, "max-gpus-per-job", 0, "largest GPU request one job may make (0: only capacity limits it)")
	fl.IntVar(&f.maxNodesPerJob, "max-nodes-per-job", 0, "largest node count one job may ask for (0: only capacity limits it)")
	fl.StringVar(&f.maxTimeout, "max-timeout", "", "longest timeout a job may have, e.g. 24h or 2d (0: no limit)")
	fl.IntVar(&f.maxRunning, "max-running", 0, "most jobs active at once (0: no cap)")
	fl.StringSliceVar(&f.priorities, "priorities", nil, "priority classes the pool accepts, e.g. low,normal,high (empty: all)")
	fl.BoolVar(&f.borrowing, "borrowing", false, "let projects run above their quota on idle capacity (preemptibly)")
	fl.BoolVar(&f.preemption, "preemption", false, "let the scheduler preempt lower-priority or borrowing work")
	fl.StringVar(&f.gpuType, "gpu-type", "", "GPU model, for information, e.g. a100-80g")
	fl.StringVar(&f.logLimit, "log-limit", "", "log limit per attempt, e.g. 2GiB: the default and ceiling of jobs' policy.log_limit (0: the server's log_limit)")
	for i, rf := range rateFlags {
		fl.StringVar(&f.rates[i], rf.name, "", "price per "+rf.unit+" in the server's currency, e.g. 2.10 (0: free)")
	}
	fl.Float64Var(&f.idleBelow, "idle-stop-below", 0, "stop jobs whose GPUs all stay under this utilisation, a ratio such as 0.05 for 5%, for --idle-stop-for (0: no idle stop)")
	fl.StringVar(&f.idleFor, "idle-stop-for", "", "how long a job's GPUs must stay idle before it is stopped, e.g. 30m")
}

// apply sets the fields of p whose flags were given; it reports whether any
// were.
func (f *poolFlags) apply(cmd *cobra.Command, p *apitypes.Pool) (changed bool, err error) {
	set := cmd.Flags().Changed
	if set("executor") {
		p.Executor = strings.TrimSpace(f.executor)
	}
	if set("node") {
		p.Nodes = make([]apitypes.Node, 0, len(f.nodes))
		for _, s := range f.nodes {
			n, err := parseNode(s)
			if err != nil {
				return false, err
			}
			p.Nodes = append(p.Nodes, n)
		}
	}
	if set("max-timeout") {
		p.MaxTimeout = ""
		if v := strings.TrimSpace(f.maxTimeout); v != "" && v != "0" {
			d, err := domain.ParseDuration(v)
			if err != nil {
				return false, usageErrorf("invalid --max-timeout: %v", err)
			}
			if d < 0 {
				return false, usageErrorf("invalid --max-timeout %q: it must not be negative", v)
			}
			p.MaxTimeout = domain.FormatDuration(d)
		}
	}
	if set("log-limit") {
		p.LogLimit = ""
		if v := strings.TrimSpace(f.logLimit); v != "" && v != "0" {
			b, err := domain.ParseByteSize(v)
			if err != nil {
				return false, usageErrorf("invalid --log-limit: %v", err)
			}
			if b < domain.MinLogLimit {
				return false, usageErrorf("invalid --log-limit %q: give at least %s, such as 2GiB, or 0 for the server's log_limit", v, domain.ByteSize(domain.MinLogLimit))
			}
			p.LogLimit = b.String()
		}
	}
	for i, rf := range rateFlags {
		if !set(rf.name) {
			continue
		}
		var m domain.Money
		var err error
		if v := strings.TrimSpace(f.rates[i]); v != "" {
			m, err = domain.ParseMoney(v)
		}
		if err == nil && m < 0 {
			err = fmt.Errorf("a rate cannot be negative")
		}
		if err != nil {
			return false, usageErrorf("invalid --%s: %v; give an amount such as --%s 2.10, or 0 for free", rf.name, err, rf.name)
		}
		*rf.field(&p.Rates) = ""
		if m != 0 {
			*rf.field(&p.Rates) = apitypes.Amount(m.String())
		}
		changed = true
	}
	if set("idle-stop-below") || set("idle-stop-for") {
		if err := f.applyIdleStop(set, p); err != nil {
			return false, err
		}
	}
	if set("priorities") {
		p.Priorities = nil
		for _, s := range f.priorities {
			if s = strings.TrimSpace(s); s != "" {
				p.Priorities = append(p.Priorities, s)
			}
		}
	}
	ints := map[string]struct {
		dst *int
		v   int
	}{
		"max-gpus-per-job":  {&p.MaxGPUsPerJob, f.maxGPUsPerJob},
		"max-nodes-per-job": {&p.MaxNodesPerJob, f.maxNodesPerJob},
		"max-running":       {&p.MaxRunning, f.maxRunning},
	}
	for name, iv := range ints {
		if set(name) {
			*iv.dst = iv.v
		}
	}
	if set("borrowing") {
		p.Borrowing = f.borrowing
	}
	if set("preemption") {
		p.Preemption = f.preemption
	}
	if set("gpu-type") {
		p.GPUType = f.gpuType
	}
	for _, name := range []string{"node", "max-gpus-per-job", "max-nodes-per-job", "max-timeout", "max-running",
		"priorities", "borrowing", "preemption", "gpu-type", "log-limit", "idle-stop-below", "idle-stop-for"} {
		changed = changed || set(name)
	}
	return changed, nil
}

func (a *app) poolCreateCmd() *cobra.Command {
	var f poolFlags
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a pool",
		Long: `Create a pool from its nodes and rules. Give each node with --node as
comma-separated key=value pairs: name, cpus, memory and gpus (GPU indices as a
list or ranges: gpus=0-3, gpus=0,2, or none). GPU indices must be unique within
the pool. Fails when the pool exists; change it with 'trainyard pool update'.

A pool on --executor NAME, an executor the server config declares (a
Kubernetes cluster), runs its jobs there and takes the cluster's nodes (those
the executor's node selector picks) instead of --node; it follows them as the
cluster grows and shrinks.`,
		Example: `  trainyard pool create standard --node name=node-a,cpus=32,memory=256GiB,gpus=0-3 \
    --max-gpus-per-job 4 --max-running 8 --borrowing --preemption --rate-gpu-hour 2.10
  trainyard pool create cpu --node name=local,cpus=8,memory=16GiB --priorities low,normal
  trainyard pool create a100 --executor gpu-cluster --max-gpus-per-job 8`,
		Args: exactArgs(1),
	}
	f.register(cmd, false)
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(); err != nil {
			return err
		}
		p := apitypes.Pool{Name: args[0]}
		if _, err := f.apply(cmd, &p); err != nil {
			return err
		}
		if len(p.Nodes) == 0 && (p.Executor == "" || p.Executor == "local") {
			return usageErrorf("a pool needs at least one node: add --node name=n1,cpus=8,memory=32GiB,gpus=0-3 (a pool on a cluster's --executor takes the cluster's nodes)")
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		if _, err := c.GetPool(cmd.Context(), p.Name); err == nil {
			return exitErrorf(ExitConflict, "pool %q already exists; change it with: trainyard pool update %s", p.Name, p.Name)
		} else if !client.IsNotFound(err) {
			return err
		}
		stored, err := c.PutPool(cmd.Context(), p)
		if err != nil {
			return err
		}
		return writePoolResult(cmd.OutOrStdout(), *output, "created", stored)
	}
	return cmd
}

func (a *app) poolUpdateCmd() *cobra.Command {
	var f poolFlags
	cmd := &cobra.Command{
		Use:   "update NAME",
		Short: "Change a pool's nodes or rules",
		Long: `Change a pool: only the flags given change, the rest is kept. --node replaces
the whole node list (give every node the pool should have). Boolean flags
take =false to turn a rule off, e.g. --borrowing=false; --max-timeout 0 and
--priorities "" remove those limits.`,
		Example: `  trainyard pool update standard --max-running 16
  trainyard pool update standard --borrowing=false
  trainyard pool update standard --rate-gpu-hour 2.10 --rate-object-gib-month 0.023
  trainyard pool update standard --idle-stop-below 0.05 --idle-stop-for 30m
  trainyard pool update standard --node name=node-a,cpus=32,memory=256GiB,gpus=0-3 \
    --node name=node-b,cpus=32,memory=256GiB,gpus=4-7`,
		Args: exactArgs(1),
	}
	f.register(cmd, true)
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		p, err := c.GetPool(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		changed, err := f.apply(cmd, &p)
		if err != nil {
			return err
		}
		if !changed {
			return usageErrorf("nothing to change: give at least one flag, e.g. --max-running 8; see 'trainyard pool update --help'")
		}
		stored, err := c.PutPool(cmd.Context(), p)
		if err != nil {
			return err
		}
		return writePoolResult(cmd.OutOrStdout(), *output, "updated", stored)
	}
	return cmd
}

func writePoolResult(w io.Writer, output, verb string, p apitypes.Pool) error {
	switch output {
	case "json":
		return writeJSON(w, p)
	case "yaml":
		return writeYAML(w, p)
	}
	_, err := fmt.Fprintf(w, "%s pool %s: %d node(s), %d GPUs, %s CPUs, %s memory\n", verb, cell(p.Name), len(p.Nodes),
		p.Capacity.GPUs, formatFloat(p.Capacity.CPUs), memText(p.Capacity.Memory))
	return err
}

// parseNode parses a --node value: name=N,cpus=C,memory=M,gpus=G. GPU
// indices may continue after commas (gpus=0,2,cpus=8).
func parseNode(s string) (apitypes.Node, error) {
	n := apitypes.Node{GPUs: []int{}}
	bad := func(format string, args ...any) error {
		return usageErrorf("invalid --node %q: %s; use name=n1,cpus=8,memory=32GiB,gpus=0-3", s, fmt.Sprintf(format, args...))
	}
	seen := map[string]bool{}
	last := ""
	for _, tok := range strings.Split(s, ",") {
		tok = strings.TrimSpace(tok)
		if tok == "" {
			continue
		}
		k, v, ok := strings.Cut(tok, "=")
		if !ok {
			if last != "gpus" {
				return n, bad("%q is not key=value", tok)
			}
			gpus, err := parseGPUs(tok)
			if err != nil {
				return n, bad("%v", err)
			}
			n.GPUs = append(n.GPUs, gpus...)
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if k == "mem" {
			k = "memory"
		}
		if seen[k] {
			return n, bad("%s is given twice", k)
		}
		seen[k] = true
		last = k
		switch k {
		case "name":
			n.Name = v
		case "cpus":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return n, bad("cpus %q is not a number", v)
			}
			n.CPUs = f
		case "memory":
			b, err := domain.ParseByteSize(v)
			if err != nil {
				return n, bad("%v", err)
			}
			n.Memory = b.String()
		case "gpus":
			if v == "" || v == "none" {
				continue
			}
			gpus, err := parseGPUs(v)
			if err != nil {
				return n, bad("%v", err)
			}
			n.GPUs = append(n.GPUs, gpus...)
		default:
			return n, bad("unknown key %q (keys: name, cpus, memory, gpus)", k)
		}
	}
	for _, k := range []string{"name", "cpus", "memory"} {
		if !seen[k] {
			return n, bad("%s is missing", k)
		}
	}
	return n, nil
}

// parseGPUs parses one GPU index or an inclusive range "a-b".
func parseGPUs(s string) ([]int, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	a, err := strconv.Atoi(strings.TrimSpace(lo))
	if err != nil || a < 0 {
		return nil, fmt.Errorf("GPU %q is not an index (0 or more) or a range such as 0-3", s)
	}
	if !isRange {
		return []int{a}, nil
	}
	b, err := strconv.Atoi(strings.TrimSpace(hi))
	if err != nil || b < a || b-a >= maxGPURange {
		return nil, fmt.Errorf("GPU range %q is not a range such as 0-3 (low to high, at most %d GPUs)", s, maxGPURange)
	}
	out := make([]int, 0, b-a+1)
	for g := a; g <= b; g++ {
		out = append(out, g)
	}
	return out, nil
}

// gpuList renders GPU indices compactly, with runs as ranges: "0-3,6".
func gpuList(gpus []int) string {
	if len(gpus) == 0 {
		return "-"
	}
	var parts []string
	for i := 0; i < len(gpus); {
		j := i
		for j+1 < len(gpus) && gpus[j+1] == gpus[j]+1 {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, strconv.Itoa(gpus[i]))
		case j == i+1:
			parts = append(parts, strconv.Itoa(gpus[i]), strconv.Itoa(gpus[j]))
		default:
			parts = append(parts, strconv.Itoa(gpus[i])+"-"+strconv.Itoa(gpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func (a *app) quotaCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "List, set and remove project quotas; request, approve or deny more for a while",
		Long: `A quota is what one project is guaranteed in one pool: GPUs, CPUs, memory and
concurrent jobs, plus how far above that it may borrow idle capacity (work
above the guarantee is preemptible) and the highest priority class it may use.
A project without a quota in a pool can only borrow there. See docs/pools.md.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.quotaLsCmd(), a.quotaSetCmd(), a.quotaRmCmd(),
		a.quotaRequestCmd(), a.quotaRequestsCmd(), a.quotaDecideCmd(true), a.quotaDecideCmd(false)) // requests.go
	return cmd
}

func (a *app) quotaLsCmd() *cobra.Command {
	var project, pool string
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List quotas",
		Long: `List quotas, by project then pool: PROJECT, POOL, the guarantee (GPUS, CPUS,
MEMORY, JOBS; "-" means not limited in that dimension), BORROW (how far above
it the project may go on idle capacity) and MAX PRIORITY.`,
		Example: `  trainyard quota ls
  trainyard quota ls --project vision -o json`,
		Args: exactArgs(0),
	}
	cmd.Flags().StringVar(&project, "project", "", "only this project's quotas")
	cmd.Flags().StringVar(&pool, "pool", "", "only quotas in this pool")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		quotas, err := c.ListQuotas(cmd.Context(), project, pool)
		if err != nil {
			return err
		}
		if quotas == nil {
			quotas = []apitypes.Quota{}
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, apitypes.QuotaList{Quotas: quotas}); ok {
			return err
		}
		if len(quotas) == 0 {
			fmt.Fprintln(cmd.ErrOrStderr(), "no quotas found")
			return nil
		}
		tw := newTable(out)
		fmt.Fprintln(tw, "PROJECT\tPOOL\tGPUS\tCPUS\tMEMORY\tJOBS\tBORROW\tMAX PRIORITY")
		for _, q := range quotas {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", cell(q.Project), cell(q.Pool), q.GPUs, quotaCPUs(q.CPUs),
				quotaMemory(q.Memory), limit(q.Jobs), borrow(q.Borrow), maxPriority(q.MaxPriority))
		}
		return tw.Flush()
	}
	return cmd
}

func (a *app) quotaSetCmd() *cobra.Command {
	var (
		gpus, jobs, borrowGPUs     int
		cpus, borrowCPUs           float64
		memory, borrowMem, maxPrio string
	)
	cmd := &cobra.Command{
		Use:   "set PROJECT POOL",
		Short: "Create or change a project's quota in a pool",
		Long: `Create or change the quota of PROJECT in POOL. On an existing quota only the
flags given change; a new quota starts from zero. The pool must exist.`,
		Example: `  trainyard quota set vision standard --gpus 2 --cpus 16 --memory 128GiB --jobs 4
  trainyard quota set vision standard --borrow-gpus 2 --max-priority high`,
		Args: exactArgs(2),
	}
	fl := cmd.Flags()
	fl.IntVar(&gpus, "gpus", 0, "guaranteed GPUs")
	fl.Float64Var(&cpus, "cpus", 0, "guaranteed CPUs (0: not limited)")
	fl.StringVar(&memory, "memory", "", "guaranteed memory, e.g. 64GiB (0: not limited)")
	fl.IntVar(&jobs, "jobs", 0, "most concurrent jobs (0: no job-count limit)")
	fl.IntVar(&borrowGPUs, "borrow-gpus", 0, "GPUs the project may borrow above its guarantee")
	fl.Float64Var(&borrowCPUs, "borrow-cpus", 0, "CPUs the project may borrow above its guarantee")
	fl.StringVar(&borrowMem, "borrow-memory", "", "memory the project may borrow above its guarantee, e.g. 32GiB")
	fl.StringVar(&maxPrio, "max-priority", "", "highest priority class the project may use here: low, normal, high or urgent (default normal)")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(); err != nil {
			return err
		}
		project, pool := args[0], args[1]
		sizes := map[string]*string{"memory": &memory, "borrow-memory": &borrowMem}
		for name, v := range sizes {
			if cmd.Flags().Changed(name) {
				b, err := domain.ParseByteSize(*v)
				if err != nil {
					return usageErrorf("invalid --%s: %v", name, err)
				}
				*v = b.String()
			}
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		q := apitypes.Quota{Project: project, Pool: pool}
		existing, err := c.ListQuotas(cmd.Context(), project, pool)
		if err != nil {
			return err
		}
		for _, e := range existing {
			if e.Project == project && e.Pool == pool {
				q = e
			}
		}
		set := cmd.Flags().Changed
		if set("gpus") {
			q.GPUs = gpus
		}
		if set("cpus") {
			q.CPUs = cpus
		}
		if set("memory") {
			q.Memory = memory
		}
		if set("jobs") {
			q.Jobs = jobs
		}
		if set("borrow-gpus") {
			q.Borrow.GPUs = borrowGPUs
		}
		if set("borrow-cpus") {
			q.Borrow.CPUs = borrowCPUs
		}
		if set("borrow-memory") {
			q.Borrow.Memory = borrowMem
		}
		if set("max-priority") {
			q.MaxPriority = maxPrio
		}
		stored, err := c.PutQuota(cmd.Context(), q)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, stored); ok {
			return err
		}
		_, err = fmt.Fprintln(out, oneLine(fmt.Sprintf("set quota of project %s in pool %s: gpu=%d cpu=%s mem=%s jobs=%s, borrow %s, max priority %s",
			stored.Project, stored.Pool, stored.GPUs, quotaCPUs(stored.CPUs), quotaMemory(stored.Memory), limit(stored.Jobs),
			borrow(stored.Borrow), maxPriority(stored.MaxPriority))))
		return err
	}
	return cmd
}

func (a *app) quotaRmCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "rm PROJECT POOL",
		Aliases: []string{"remove", "delete"},
		Short:   "Remove a project's quota in a pool",
		Long: `Remove the quota of PROJECT in POOL. The project keeps its jobs; in that pool
it can then only borrow idle capacity, if the pool allows borrowing.`,
		Example: `  trainyard quota rm vision standard`,
		Args:    exactArgs(2),
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.client()
		if err != nil {
			return err
		}
		if err := c.DeleteQuota(cmd.Context(), args[0], args[1]); err != nil {
			return err
		}
		_, err = fmt.Fprintf(cmd.OutOrStdout(), "removed the quota of project %s in pool %s\n", args[0], args[1])
		return err
	}
	return cmd
}

func (a *app) projectCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "project",
		Short: "List projects and set their fair-share weight",
		Long: `A project is a team that owns jobs and quotas. Its shares weight its fair
share of contended capacity: a project with shares 2 gets twice the share of
one with 1 (the default for projects never set).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.projectLsCmd(), a.projectSetCmd())
	return cmd
}

func (a *app) projectLsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List projects with their shares",
		Long: `List the projects whose shares were set: NAME, SHARES and AGE. Projects not
listed have shares 1.`,
		Example: `  trainyard project ls`,
		Args:    exactArgs(0),
	}
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		projects, err := c.ListProjects(cmd.Context())
		if err != nil {
			return err
		}
		if projects == nil {
			projects = []apitypes.Project{}
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, apitypes.ProjectList{Projects: projects}); ok {
			return err
		}
		if len(projects) == 0 {
			fmt.Fprintln(cmd.ErrOrStderr(), "no projects have shares set; every project has shares 1")
			return nil
		}
		now := a.env.now()
		tw := newTable(out)
		fmt.Fprintln(tw, "NAME\tSHARES\tAGE")
		for _, p := range projects {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", cell(p.Name), formatFloat(p.Shares), age(now, p.CreatedAt))
		}
		return tw.Flush()
	}
	return cmd
}

func (a *app) projectSetCmd() *cobra.Command {
	var shares float64
	cmd := &cobra.Command{
		Use:   "set NAME --shares N",
		Short: "Create a project or set its shares",
		Long: `Create a project or set its shares: its weight in fair sharing of contended
capacity, more than 0 and at most 1000 (default 1).`,
		Example: `  trainyard project set vision --shares 2`,
		Args:    exactArgs(1),
	}
	cmd.Flags().Float64Var(&shares, "shares", 0, "fair-share weight, more than 0 and at most 1000 (required)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if !cmd.Flags().Changed("shares") {
			return usageErrorf("--shares is required, e.g. trainyard project set %s --shares 2", args[0])
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		p, err := c.SetProject(cmd.Context(), args[0], shares)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(cmd.OutOrStdout(), "project %s has shares %s\n", oneLine(p.Name), formatFloat(p.Shares))
		return err
	}
	return cmd
}

func (a *app) queueCmd() *cobra.Command {
	var pool string
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Show waiting jobs in scheduling order",
		Long: `Show the jobs waiting to start, in the order the scheduler will consider them:
POS (position in its pool), ID, NAME, PROJECT, PRIORITY, REASON (why it waits),
EST. START (from the running jobs' timeouts; "-" when unknown) and MESSAGE.
Without --pool every pool is shown, with a POOL column.

Only the jobs you may list (as in trainyard ls) are shown; POS still counts
every waiting job, so a gap means jobs you may not see wait ahead.`,
		Example: `  trainyard queue --pool standard
  trainyard queue -o json`,
		Args: exactArgs(0),
	}
	cmd.Flags().StringVar(&pool, "pool", "", "only this pool's queue")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		entries, err := c.Queue(cmd.Context(), pool)
		if err != nil {
			return err
		}
		if entries == nil {
			entries = []apitypes.QueueEntry{}
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, apitypes.Queue{Entries: entries}); ok {
			return err
		}
		if len(entries) == 0 {
			fmt.Fprintln(cmd.ErrOrStderr(), "no jobs are waiting")
			return nil
		}
		now := a.env.now()
		tw := newTable(out)
		header := []string{"POS", "ID", "NAME", "PROJECT"}
		if pool == "" {
			header = append(header, "POOL")
		}
		fmt.Fprintln(tw, strings.Join(append(header, "PRIORITY", "REASON", "EST. START", "MESSAGE"), "\t"))
		for _, e := range entries {
			row := []string{strconv.Itoa(e.Position), strconv.FormatInt(e.ID, 10), cell(e.Name), cell(e.Project)}
			if pool == "" {
				row = append(row, cell(e.Pool))
			}
			row = append(row, cell(e.Priority), cell(e.Reason), estimatedStart(now, e.EstimatedStart), cell(e.Message))
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		return tw.Flush()
	}
	return cmd
}

// estimatedStart renders an expected start time relative to now: "in 5m",
// "now" once it has passed, "-" when unknown.
func estimatedStart(now time.Time, t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	if !t.After(now) {
		return "now"
	}
	return "in " + age(*t, now)
}

// limit renders a count where 0 means "no limit" as "-".
func limit(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// borrow renders a borrowing allowance: "gpu=2 cpu=8 mem=64GiB", only the
// non-zero parts; "-" when there is none.
func borrow(b apitypes.QuotaBorrow) string {
	var parts []string
	if b.GPUs != 0 {
		parts = append(parts, "gpu="+strconv.Itoa(b.GPUs))
	}
	if b.CPUs != 0 {
		parts = append(parts, "cpu="+formatFloat(b.CPUs))
	}
	if b.Memory != "" && b.Memory != "0" {
		parts = append(parts, "mem="+memText(b.Memory))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// quotaCPUs renders a quota's CPUs, where 0 means "not limited", as "-".
func quotaCPUs(f float64) string {
	if f == 0 {
		return "-"
	}
	return formatFloat(f)
}

// quotaMemory renders a quota's memory, where 0 means "not limited", as "-".
func quotaMemory(s string) string {
	if s == "0" {
		return "-"
	}
	return memText(s)
}

// maxPriority renders a quota's priority ceiling; empty means normal.
func maxPriority(p string) string {
	if p == "" {
		return string(domain.PriorityNormal)
	}
	return oneLine(p)
}

// poolHardwareNote says that a pool declares more than the machine that
// runs its jobs has: on purpose (simulated) or as a warning.
func poolHardwareNote(p apitypes.Pool) string {
	if p.Simulated {
		return fmt.Sprintf("pool %s is simulated: it %s (inventory.simulated in the server config)", p.Name, p.BeyondHardware)
	}
	return fmt.Sprintf("warning: pool %s %s: jobs placed there get devices that do not exist; set inventory: {simulated: true} in the server config if this is a test setup", p.Name, p.BeyondHardware)
}

// openPoolNote is pool ls's line for a pool without quotas.
func openPoolNote(p apitypes.Pool) string {
	return fmt.Sprintf("pool %s is open: no quotas, so every project runs any job there, shared by fair share; the first quota set in it closes it (docs/pools.md)", p.Name)
}

// percent writes a 0–1 ratio as a percentage: 0.05 is "5%", 0.125 "12.5%".
func percent(r float64) string {
	return strconv.FormatFloat(math.Round(r*1e4)/100, 'f', -1, 64) + "%" // to 0.01%: 0.07*100 is 7.000000000000001
}
