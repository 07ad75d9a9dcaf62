package simulate

import (
	"cmp"
	"encoding"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"trainyard/internal/domain"
	"trainyard/internal/lazyre"
	"trainyard/internal/scheduler"
	"trainyard/internal/yamlcheck"
)

// MaxWorkloadBytes bounds the size of a workload file.
const MaxWorkloadBytes = 4 << 20

// Workload is a simulation input: the cluster (pools, quotas, projects), the
// scheduler's configuration and the job streams to feed it. See
// docs/simulate.md for the file format.
type Workload struct {
	// Seed drives every random draw (arrivals, runtimes). Required: the same
	// file and seed always give the same report.
	Seed int64 `yaml:"seed"`
	// Duration is how much virtual time to simulate (e.g. 72h, 7d). The run
	// ends earlier when every job has ended and no stream will submit more.
	Duration   domain.Duration `yaml:"duration"`
	Scheduler  SchedulerConfig `yaml:"scheduler"`
	Simulation EngineConfig    `yaml:"simulation"`
	Pools      []PoolSpec      `yaml:"pools"`
	Quotas     []QuotaSpec     `yaml:"quotas"`
	Projects   []ProjectSpec   `yaml:"projects"`
	Streams    []StreamSpec    `yaml:"jobs"`
}

// SchedulerConfig is the scheduler.Config the simulation runs with.
type SchedulerConfig struct {
	// FairShareHalfLife is the half-life of historical usage (default 24h).
	FairShareHalfLife domain.Duration `yaml:"fair_share_half_life"`
	// MaxPreemptionsPerCycle bounds victims per pass (default 64; negative
	// disables preemption).
	MaxPreemptionsPerCycle int `yaml:"max_preemptions_per_cycle"`
	// ReservationsPerPool is how many capacity-blocked jobs per pool hold a
	// reservation against starvation (default 1).
	ReservationsPerPool int `yaml:"reservations_per_pool"`
}

// EngineConfig tunes the simulated control loop, not the scheduler.
type EngineConfig struct {
	// Tick is the period of scheduling passes when nothing else happens
	// (default 1m). Passes also run after every batch of events.
	Tick domain.Duration `yaml:"tick"`
	// CheckpointInterval is how often running jobs checkpoint (default 10m).
	// A preempted job resumes from its last checkpoint; work since then is
	// lost.
	CheckpointInterval domain.Duration `yaml:"checkpoint_interval"`
	// StopDelay is how long a preempted job keeps its resources before they
	// are free (default 0: immediately).
	StopDelay domain.Duration `yaml:"stop_delay"`
}

// PoolSpec is a domain.Pool in workload form.
type PoolSpec struct {
	Name           string            `yaml:"name"`
	GPUType        string            `yaml:"gpu_type"`
	Nodes          []NodeSpec        `yaml:"nodes"`
	MaxGPUsPerJob  int               `yaml:"max_gpus_per_job"`
	MaxNodesPerJob int               `yaml:"max_nodes_per_job"`
	MaxTimeout     domain.Duration   `yaml:"max_timeout"`
	MaxRunning     int               `yaml:"max_running"`
	Priorities     []domain.Priority `yaml:"priorities"`
	Borrowing      bool              `yaml:"borrowing"`
	Preemption     bool              `yaml:"preemption"`
}

// NodeSpec is a domain.Node in workload form. With Count set it declares
// Count identical nodes named Name-1 .. Name-Count.
type NodeSpec struct {
	Name   string          `yaml:"name"`
	Count  int             `yaml:"count"`
	CPUs   float64         `yaml:"cpus"`
	Memory domain.ByteSize `yaml:"memory"`
	GPUs   GPUList         `yaml:"gpus"`
}

// names lists the names of the nodes n declares.
func (n NodeSpec) names() []string {
	if n.Count <= 0 {
		return []string{n.Name}
	}
	out := make([]string, n.Count)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", n.Name, i+1)
	}
	return out
}

// maxNodeGPUs bounds the GPUs of one node and maxNodeCount the nodes of a
// workload: far above real clusters, low enough to catch typos.
const (
	maxNodeGPUs  = 1024
	maxNodeCount = 100_000
)

// GPUList is a node's GPU device indices: a list ([0, 1, 2, 3]) or a count
// (4, meaning indices 0 to 3).
type GPUList []int

// UnmarshalYAML reads a list of indices or a count.
func (g *GPUList) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			*g = nil
			return nil
		}
		c, err := strconv.Atoi(n.Value)
		if err != nil || c < 0 || c > maxNodeGPUs {
			return fmt.Errorf("%q is not valid here; want a GPU count from 0 to %d or a list of indices such as [0, 1, 2, 3]", n.Value, maxNodeGPUs)
		}
		out := make(GPUList, c)
		for i := range out {
			out[i] = i
		}
		*g = out
		return nil
	case yaml.SequenceNode:
		out := make(GPUList, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := strconv.Atoi(c.Value)
			if c.Kind != yaml.ScalarNode || err != nil {
				return fmt.Errorf("%q is not a GPU index; list whole numbers such as [0, 1, 2, 3]", c.Value)
			}
			out = append(out, v)
		}
		*g = out
		return nil
	}
	return fmt.Errorf("must be a GPU count (8) or a list of indices ([0, 1, 2, 3])")
}

// QuotaSpec is a domain.Quota in workload form.
type QuotaSpec struct {
	Project     string          `yaml:"project"`
	Pool        string          `yaml:"pool"`
	GPUs        int             `yaml:"gpus"`
	CPUs        float64         `yaml:"cpus"`
	Memory      domain.ByteSize `yaml:"memory"`
	Jobs        int             `yaml:"jobs"`
	Borrow      LimitsSpec      `yaml:"borrow"`
	MaxPriority domain.Priority `yaml:"max_priority"`
}

// LimitsSpec is a domain.Limits in workload form.
type LimitsSpec struct {
	GPUs   int             `yaml:"gpus"`
	CPUs   float64         `yaml:"cpus"`
	Memory domain.ByteSize `yaml:"memory"`
	Jobs   int             `yaml:"jobs"`
}

// ProjectSpec is a domain.Project in workload form.
type ProjectSpec struct {
	Name   string  `yaml:"name"`
	Shares float64 `yaml:"shares"`
}

// StreamSpec generates the jobs of one project in one pool. It submits in
// one of three ways:
//
//   - count alone: count jobs at once, at submit_at (a burst);
//   - rate: Poisson arrivals at rate jobs per hour from submit_at until
//     until (default: the end), at most count jobs when count is set;
//   - backlog: keeps backlog jobs of this stream queued from submit_at until
//     until (sustained demand), at most count jobs when count is set.
type StreamSpec struct {
	Name        string          `yaml:"name"` // label; default "<project>/<index>"
	Project     string          `yaml:"project"`
	Pool        string          `yaml:"pool"`
	Priority    domain.Priority `yaml:"priority"` // default normal
	Count       int             `yaml:"count"`
	Rate        float64         `yaml:"rate"`
	Backlog     int             `yaml:"backlog"`
	SubmitAt    domain.Duration `yaml:"submit_at"`
	Until       domain.Duration `yaml:"until"`
	GPUs        int             `yaml:"gpus"`   // per node
	CPUs        float64         `yaml:"cpus"`   // per node
	Memory      domain.ByteSize `yaml:"memory"` // per node
	Nodes       int             `yaml:"nodes"`  // gang size; default 1
	Runtime     Runtime         `yaml:"runtime"`
	Timeout     domain.Duration `yaml:"timeout"` // per attempt; 0 = unbounded
	Preemptible bool            `yaml:"preemptible"`
}

// Runtime is how long a job needs to run: fixed ("2h") or drawn uniformly
// ({min: 1h, max: 3h}).
type Runtime struct {
	Min, Max time.Duration
}

// UnmarshalYAML reads a duration scalar or a {min, max} mapping.
func (r *Runtime) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		d, err := domain.ParseDuration(n.Value)
		if err != nil {
			return err
		}
		r.Min, r.Max = d, d
		return nil
	case yaml.MappingNode:
		var seen [2]bool
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			d, err := domain.ParseDuration(v.Value)
			if v.Kind != yaml.ScalarNode {
				err = fmt.Errorf("must be a duration such as 2h")
			}
			if err != nil {
				return fmt.Errorf("%s: %v", k.Value, err)
			}
			switch k.Value {
			case "min":
				r.Min, seen[0] = d, true
			case "max":
				r.Max, seen[1] = d, true
			default:
				return fmt.Errorf("unknown field %q; a runtime range has min and max", k.Value)
			}
		}
		if !seen[0] || !seen[1] {
			return fmt.Errorf("a runtime range needs both min and max, e.g. {min: 1h, max: 3h}")
		}
		return nil
	}
	return fmt.Errorf("must be a duration (2h) or a range ({min: 1h, max: 3h})")
}

// MarshalYAML writes the fixed or range form.
func (r Runtime) MarshalYAML() (any, error) {
	if r.Min == r.Max {
		return domain.FormatDuration(r.Min), nil
	}
	return map[string]string{"min": domain.FormatDuration(r.Min), "max": domain.FormatDuration(r.Max)}, nil
}

// LoadFile reads and parses a workload file. Problems come back as
// domain.FieldErrors (errors.Is(err, domain.ErrInvalid)) with field paths and
// lines.
func LoadFile(path string) (Workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return Workload{}, fmt.Errorf("read workload: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxWorkloadBytes+1))
	if err != nil {
		return Workload{}, fmt.Errorf("read workload %s: %w", path, err)
	}
	return Parse(b)
}

// Parse decodes a workload document strictly (unknown fields are errors),
// applies defaults and validates it. It returns every problem found.
func Parse(doc []byte) (w Workload, err error) {
	defer func() {
		// The YAML library is not ours: a panic inside it is still bad input.
		if r := recover(); r != nil {
			w, err = Workload{}, domain.FieldErrors{{Path: "document", Message: "could not be read; check that it is well-formed YAML"}}
		}
	}()
	if len(doc) > MaxWorkloadBytes {
		return Workload{}, domain.FieldErrors{{Path: "document", Message: fmt.Sprintf("is over %d bytes; split the workload", MaxWorkloadBytes)}}
	}
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return Workload{}, domain.FieldErrors{yamlError("document", err)}
	}
	if len(root.Content) == 0 {
		return Workload{}, domain.FieldErrors{{Path: "document", Message: "is empty; a workload needs at least seed, duration, pools and jobs"}}
	}
	top := root.Content[0]
	if top.Kind != yaml.MappingNode {
		return Workload{}, domain.FieldErrors{{Path: "document", Line: top.Line, Message: "must be a mapping (seed: ..., pools: ..., jobs: ...)"}}
	}
	lines, values := map[string]int{}, map[string]string{}
	// checkFields reports unknown fields and values the field types reject;
	// the decoder then fills w, and validation checks what it means.
	errs := checkFields(top, reflect.TypeFor[Workload](), "", lines, values)
	if err := yaml.Unmarshal(doc, &w); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) || len(errs) == 0 {
			errs = append(errs, typeErrors(err, lines, values)...)
		}
		return Workload{}, sortErrors(errs)
	}
	_, hasSeed := lines["seed"]
	verrs := w.validate(hasSeed)
	for i := range verrs {
		verrs[i].Line = lineOf(lines, verrs[i].Path)
	}
	if errs = append(errs, verrs...); len(errs) > 0 {
		return Workload{}, sortErrors(errs)
	}
	w.defaults()
	return w, nil
}

// checkFields walks the document against t, recording each path's line and
// reporting unknown fields and wrong shapes (a list where a mapping belongs).
func checkFields(n *yaml.Node, t reflect.Type, path string, lines map[string]int, values map[string]string) domain.FieldErrors {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if path != "" {
		lines[path] = n.Line
	}
	label := path
	if label == "" {
		label = "document"
	}
	// Types that decode themselves: run their decoder here, where the path
	// and line are known (the YAML library reports their errors without).
	if u, ok := reflect.New(t).Interface().(yaml.Unmarshaler); ok {
		if err := u.UnmarshalYAML(n); err != nil {
			return domain.FieldErrors{{Path: label, Line: n.Line, Message: err.Error()}}
		}
		return nil
	}
	if u, ok := reflect.New(t).Interface().(encoding.TextUnmarshaler); ok {
		if n.Kind != yaml.ScalarNode {
			return domain.FieldErrors{{Path: label, Line: n.Line, Message: "must be a single value, not a list or mapping"}}
		}
		if n.Tag == "!!null" {
			return nil
		}
		if err := u.UnmarshalText([]byte(n.Value)); err != nil {
			return domain.FieldErrors{{Path: label, Line: n.Line, Message: err.Error()}}
		}
		return nil
	}
	if n.Kind == yaml.ScalarNode && path != "" {
		values[path] = n.Value
	}
	var errs domain.FieldErrors
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return nil
		}
		if n.Kind != yaml.MappingNode {
			return domain.FieldErrors{{Path: label, Line: n.Line, Message: "must be a mapping with fields " + strings.Join(fieldNames(t), ", ")}}
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			f, ok := fieldByTag(t, k.Value)
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			if !ok {
				msg := fmt.Sprintf("unknown field %q", k.Value)
				names := fieldNames(t)
				if s := closestName(k.Value, names); s != "" {
					msg += fmt.Sprintf("; did you mean %q?", s)
				}
				msg += " (valid fields: " + strings.Join(names, ", ") + ")"
				errs = append(errs, domain.FieldError{Path: p, Line: k.Line, Message: msg})
				continue
			}
			errs = append(errs, checkFields(v, f.Type, p, lines, values)...)
		}
	case reflect.Slice:
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return nil
		}
		if n.Kind != yaml.SequenceNode {
			return domain.FieldErrors{{Path: label, Line: n.Line, Message: "must be a list"}}
		}
		for i, c := range n.Content {
			errs = append(errs, checkFields(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), lines, values)...)
		}
	}
	return errs
}

func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if strings.Split(f.Tag.Get("yaml"), ",")[0] == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func fieldNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if n := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]; n != "" && n != "-" {
			out = append(out, n)
		}
	}
	return out
}

// closestName returns the name sharing s's singular/plural stem, or the
// likely typo yamlcheck.Suggest finds, or "".
func closestName(s string, names []string) string {
	for _, n := range names {
		if strings.TrimSuffix(n, "s") == strings.TrimSuffix(s, "s") {
			return n
		}
	}
	return yamlcheck.Suggest(s, names, nil)
}

var yamlLineRE = lazyre.New(`line (\d+): (.*)`)

// yamlError turns a YAML syntax error into a field error with its line.
func yamlError(path string, err error) domain.FieldError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		l, _ := strconv.Atoi(m[1])
		return domain.FieldError{Path: path, Line: l, Message: "is not valid YAML: " + m[2]}
	}
	return domain.FieldError{Path: path, Message: "is not valid YAML: " + msg}
}

// typeErrors turns the decoder's errors (wrong value types) into field
// errors. The library gives only a line; the field is the one on that line
// holding the offending value.
func typeErrors(err error, lines map[string]int, values map[string]string) domain.FieldErrors {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return domain.FieldErrors{yamlError("document", err)}
	}
	var errs domain.FieldErrors
	for _, e := range te.Errors {
		m := yamlLineRE.FindStringSubmatch(e)
		if m == nil {
			errs = append(errs, domain.FieldError{Path: "document", Message: e})
			continue
		}
		l, _ := strconv.Atoi(m[1])
		errs = append(errs, domain.FieldError{Path: pathAt(lines, values, l, m[2]), Line: l, Message: cleanTypeMessage(m[2])})
	}
	return errs
}

// pathAt picks the field on line l whose value appears in msg; failing
// that, the outermost node on the line.
func pathAt(lines map[string]int, values map[string]string, l int, msg string) string {
	var onLine []string
	for p, pl := range lines {
		if pl == l {
			onLine = append(onLine, p)
		}
	}
	if len(onLine) == 0 {
		return "document"
	}
	slices.SortFunc(onLine, func(a, b string) int { return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b)) })
	if m := unmarshalRE.FindStringSubmatch(msg); m != nil {
		for _, p := range onLine {
			if v, ok := values[p]; ok && v == m[2] {
				return p
			}
		}
	}
	return onLine[0]
}

var unmarshalRE = lazyre.New("^cannot unmarshal !!(\\w+) `(.*)` into (.*)$")

func cleanTypeMessage(s string) string {
	m := unmarshalRE.FindStringSubmatch(s)
	if m == nil {
		return s
	}
	want := m[3]
	switch {
	case strings.Contains(want, "int"):
		want = "a whole number"
	case strings.Contains(want, "float"):
		want = "a number"
	case want == "bool":
		want = "true or false"
	case want == "string":
		want = "a string"
	}
	return fmt.Sprintf("%q is not valid here; want %s", m[2], want)
}

// lineOf returns the line of path or of its nearest recorded ancestor.
func lineOf(lines map[string]int, path string) int {
	for path != "" {
		if l, ok := lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			return 0
		}
		path = path[:i]
	}
	return 0
}

// Defaults.
const (
	defaultTick       = time.Minute
	defaultCheckpoint = 10 * time.Minute
	defaultHalfLife   = 24 * time.Hour
	maxDuration       = 366 * 24 * time.Hour
	maxJobs           = 2_000_000
)

func (w *Workload) defaults() {
	if w.Simulation.Tick == 0 {
		w.Simulation.Tick = domain.Duration(defaultTick)
	}
	if w.Simulation.CheckpointInterval == 0 {
		w.Simulation.CheckpointInterval = domain.Duration(defaultCheckpoint)
	}
	if w.Scheduler.FairShareHalfLife == 0 {
		w.Scheduler.FairShareHalfLife = domain.Duration(defaultHalfLife)
	}
	for i := range w.Streams {
		s := &w.Streams[i]
		if s.Priority == "" {
			s.Priority = domain.PriorityNormal
		}
		if s.Nodes == 0 {
			s.Nodes = 1
		}
		if s.Name == "" {
			s.Name = fmt.Sprintf("%s/%d", s.Project, i)
		}
		if s.Until == 0 {
			s.Until = w.Duration
		}
	}
	for i := range w.Quotas {
		if w.Quotas[i].MaxPriority == "" {
			w.Quotas[i].MaxPriority = domain.PriorityNormal
		}
	}
	for i := range w.Projects {
		if w.Projects[i].Shares == 0 {
			w.Projects[i].Shares = 1
		}
	}
}

// validate reports every semantic problem, with field paths.
func (w *Workload) validate(hasSeed bool) domain.FieldErrors {
	var errs domain.FieldErrors
	if !hasSeed {
		errs.Add("seed", "is required; pick any integer (e.g. seed: 1) so that runs are reproducible")
	}
	switch d := w.Duration.D(); {
	case d <= 0:
		errs.Add("duration", "is required and must be positive, e.g. 72h or 7d")
	case d > maxDuration:
		errs.Add("duration", "is %s; at most 366d can be simulated", w.Duration)
	}
	nonNegDur := func(path string, d domain.Duration) {
		if d < 0 {
			errs.Add(path, "is negative; use zero or a positive duration")
		}
	}
	nonNegDur("scheduler.fair_share_half_life", w.Scheduler.FairShareHalfLife)
	if w.Scheduler.ReservationsPerPool < 0 {
		errs.Add("scheduler.reservations_per_pool", "is negative; use 0 for the default (1)")
	}
	if t := w.Simulation.Tick.D(); t < 0 || (t > 0 && t < time.Second) {
		errs.Add("simulation.tick", "is %s; use at least 1s (default 1m)", w.Simulation.Tick)
	} else if t > 0 && w.Duration > 0 && w.Duration.D()/t > 10_000_000 {
		errs.Add("simulation.tick", "gives more than 10 million passes over %s; use a longer tick", w.Duration)
	}
	nonNegDur("simulation.checkpoint_interval", w.Simulation.CheckpointInterval)
	nonNegDur("simulation.stop_delay", w.Simulation.StopDelay)

	validPriority := func(path string, p domain.Priority) {
		if p != "" && p.Rank() < 0 {
			errs.Add(path, "%q is not a priority class; use low, normal, high or urgent", p)
		}
	}

	pools := map[string]PoolSpec{}
	totalNodes := 0
	if len(w.Pools) == 0 {
		errs.Add("pools", "is required: list at least one pool with its nodes")
	}
	for i, p := range w.Pools {
		path := fmt.Sprintf("pools[%d]", i)
		if p.Name == "" {
			errs.Add(path+".name", "is required")
		} else if _, dup := pools[p.Name]; dup {
			errs.Add(path+".name", "pool %q is declared twice; pool names must be unique", p.Name)
		}
		pools[p.Name] = p
		if len(p.Nodes) == 0 {
			errs.Add(path+".nodes", "is required: list the pool's nodes (name, cpus, memory, gpus)")
		}
		nodes := map[string]bool{}
		for j, n := range p.Nodes {
			np := fmt.Sprintf("%s.nodes[%d]", path, j)
			switch {
			case n.Count < 0 || n.Count > maxNodeCount:
				errs.Add(np+".count", "is %d; use 1 to %d identical nodes, or leave it out for one node", n.Count, maxNodeCount)
			case n.Name == "":
				errs.Add(np+".name", "is required")
			default:
				totalNodes += max(n.Count, 1)
				for _, name := range n.names() {
					if nodes[name] {
						errs.Add(np+".name", "node %q appears twice in pool %q", name, p.Name)
						break
					}
					nodes[name] = true
				}
			}
			if n.CPUs < 0 {
				errs.Add(np+".cpus", "is negative")
			}
			if n.CPUs == 0 && n.Memory == 0 && len(n.GPUs) == 0 {
				errs.Add(np, "has no cpus, memory or gpus; give the node some capacity")
			}
			seen := map[int]bool{}
			for k, g := range n.GPUs {
				if g < 0 || seen[g] {
					errs.Add(fmt.Sprintf("%s.gpus[%d]", np, k), "GPU index %d is negative or repeated; list distinct device indices such as [0, 1, 2, 3]", g)
				}
				seen[g] = true
			}
		}
		for k, pr := range p.Priorities {
			validPriority(fmt.Sprintf("%s.priorities[%d]", path, k), pr)
		}
		for _, f := range []struct {
			name string
			v    int
		}{{"max_gpus_per_job", p.MaxGPUsPerJob}, {"max_nodes_per_job", p.MaxNodesPerJob}, {"max_running", p.MaxRunning}} {
			if f.v < 0 {
				errs.Add(path+"."+f.name, "is negative; use 0 for no limit")
			}
		}
		nonNegDur(path+".max_timeout", p.MaxTimeout)
	}

	if totalNodes > maxNodeCount {
		errs.Add("pools", "declare %d nodes; at most %d can be simulated", totalNodes, maxNodeCount)
	}

	projects := map[string]bool{}
	for i, p := range w.Projects {
		path := fmt.Sprintf("projects[%d]", i)
		if p.Name == "" {
			errs.Add(path+".name", "is required")
		} else if projects[p.Name] {
			errs.Add(path+".name", "project %q is declared twice", p.Name)
		}
		projects[p.Name] = true
		if p.Shares < 0 {
			errs.Add(path+".shares", "is negative; shares weight fair share and must be positive (default 1)")
		}
	}

	quotas := map[[2]string]bool{}
	for i, q := range w.Quotas {
		path := fmt.Sprintf("quotas[%d]", i)
		if q.Project == "" {
			errs.Add(path+".project", "is required")
		}
		if _, ok := pools[q.Pool]; !ok {
			errs.Add(path+".pool", "%q is not a pool of this workload; declare it under pools", q.Pool)
		}
		if quotas[[2]string{q.Project, q.Pool}] {
			errs.Add(path, "project %q already has a quota in pool %q", q.Project, q.Pool)
		}
		quotas[[2]string{q.Project, q.Pool}] = true
		if q.GPUs < 0 || q.CPUs < 0 || q.Memory < 0 || q.Jobs < 0 || q.Borrow.GPUs < 0 || q.Borrow.CPUs < 0 || q.Borrow.Memory < 0 || q.Borrow.Jobs < 0 {
			errs.Add(path, "has a negative limit; limits are zero or more")
		}
		validPriority(path+".max_priority", q.MaxPriority)
	}

	if len(w.Streams) == 0 {
		errs.Add("jobs", "is required: list at least one job stream (project, pool, count or rate or backlog, resources, runtime)")
	}
	total := 0.0
	for i, s := range w.Streams {
		path := fmt.Sprintf("jobs[%d]", i)
		if s.Project == "" {
			errs.Add(path+".project", "is required")
		}
		pool, ok := pools[s.Pool]
		if !ok {
			errs.Add(path+".pool", "%q is not a pool of this workload; declare it under pools", s.Pool)
		}
		validPriority(path+".priority", s.Priority)
		modes := 0
		if s.Rate != 0 {
			modes++
		}
		if s.Backlog != 0 {
			modes++
		}
		switch {
		case s.Count < 0:
			errs.Add(path+".count", "is negative")
		case s.Rate < 0:
			errs.Add(path+".rate", "is negative; rate is jobs per hour")
		case s.Backlog < 0:
			errs.Add(path+".backlog", "is negative")
		case modes > 1:
			errs.Add(path, "sets both rate and backlog; choose one way to submit")
		case modes == 0 && s.Count == 0:
			errs.Add(path, "submits nothing: set count (a burst), rate (jobs per hour) or backlog (jobs kept queued)")
		}
		if s.Count > maxJobs {
			errs.Add(path+".count", "is over %d jobs", maxJobs)
		}
		if w.Duration > 0 && s.Rate*w.Duration.D().Hours() > maxJobs {
			errs.Add(path+".rate", "would submit over %d jobs in %s", maxJobs, w.Duration)
		}
		total += float64(s.Count)
		nonNegDur(path+".submit_at", s.SubmitAt)
		nonNegDur(path+".until", s.Until)
		if w.Duration > 0 && s.SubmitAt > w.Duration {
			errs.Add(path+".submit_at", "is %s, after the end of the simulation (%s)", s.SubmitAt, w.Duration)
		}
		if s.Until != 0 && s.Until < s.SubmitAt {
			errs.Add(path+".until", "is before submit_at")
		}
		if s.GPUs < 0 || s.CPUs < 0 || s.Memory < 0 {
			errs.Add(path, "has a negative resource request")
		} else if s.GPUs == 0 && s.CPUs == 0 && s.Memory == 0 {
			errs.Add(path, "requests no resources; set gpus, cpus or memory")
		}
		if s.Nodes < 0 {
			errs.Add(path+".nodes", "is negative; nodes is the gang size (default 1)")
		}
		if s.Runtime.Max <= 0 {
			errs.Add(path+".runtime", "is required and must be positive: a duration (2h) or a range ({min: 1h, max: 3h})")
		} else if s.Runtime.Min <= 0 || s.Runtime.Min > s.Runtime.Max {
			errs.Add(path+".runtime", "range must have 0 < min <= max")
		}
		nonNegDur(path+".timeout", s.Timeout)
		if ok && s.Project != "" && s.Nodes >= 0 && s.GPUs >= 0 && s.CPUs >= 0 && s.Memory >= 0 {
			// Reject jobs the server would refuse at submit time: they
			// would only sit in the queue and hide the workload's mistake.
			var quota *domain.Quota
			open := true
			for _, q := range w.Quotas {
				open = open && q.Pool != s.Pool
				if q.Project == s.Project && q.Pool == s.Pool {
					quota = &domain.Quota{Project: q.Project, Pool: q.Pool,
						Guaranteed:  domain.Limits{GPUs: q.GPUs, CPUs: q.CPUs, Memory: q.Memory, Jobs: q.Jobs},
						Borrow:      domain.Limits{GPUs: q.Borrow.GPUs, CPUs: q.Borrow.CPUs, Memory: q.Borrow.Memory, Jobs: q.Borrow.Jobs},
						MaxPriority: q.MaxPriority}
					break
				}
			}
			spec := domain.Spec{Project: s.Project, Pool: s.Pool,
				Resources: domain.Resources{GPUs: s.GPUs, CPUs: s.CPUs, Memory: s.Memory, Nodes: max(s.Nodes, 1)},
				Policy:    domain.Policy{Timeout: s.Timeout, Priority: s.Priority, Preemptible: s.Preemptible}}
			for _, e := range scheduler.Admit(pool.domain(), quota, open, spec) {
				errs.Add(path+specPaths.Replace("."+e.Path), "%s", specPaths.Replace(e.Message))
			}
		}
	}
	if total > maxJobs {
		errs.Add("jobs", "submit over %d jobs in all; shrink the counts", maxJobs)
	}
	return errs
}

// sortErrors orders problems by line, then path, so they read top to bottom.
func sortErrors(errs domain.FieldErrors) domain.FieldErrors {
	slices.SortStableFunc(errs, func(a, b domain.FieldError) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), strings.Compare(a.Path, b.Path))
	})
	return errs
}

// specPaths renames job-spec field paths to the stream fields that set them.
var specPaths = strings.NewReplacer(
	".resources.gpus", ".gpus", ".resources.cpus", ".cpus", ".resources.memory", ".memory",
	".resources.nodes", ".nodes", ".resources", "", ".policy.priority", ".priority",
	".policy.timeout", ".timeout", ".policy.preemptible", ".preemptible",
	"resources.gpus", "gpus", "resources.cpus", "cpus", "resources.memory", "memory",
	"resources.nodes", "nodes", "policy.priority", "priority", "policy.timeout", "timeout",
	"policy.preemptible", "preemptible",
)

// domainPools converts the workload's pools.
func (w *Workload) domainPools() []domain.Pool {
	out := make([]domain.Pool, 0, len(w.Pools))
	for _, p := range w.Pools {
		out = append(out, p.domain())
	}
	return out
}

func (p PoolSpec) domain() domain.Pool {
	dp := domain.Pool{Name: p.Name, Executor: "simulated", GPUType: p.GPUType, MaxGPUsPerJob: p.MaxGPUsPerJob,
		MaxNodesPerJob: p.MaxNodesPerJob, MaxTimeout: p.MaxTimeout, MaxRunning: p.MaxRunning,
		Priorities: slices.Clone(p.Priorities), Borrowing: p.Borrowing, Preemption: p.Preemption}
	for _, n := range p.Nodes {
		for _, name := range n.names() {
			dp.Nodes = append(dp.Nodes, domain.Node{Name: name, CPUs: n.CPUs, Memory: n.Memory, GPUs: slices.Clone([]int(n.GPUs))})
		}
	}
	return dp
}

func (w *Workload) domainQuotas() []domain.Quota {
	out := make([]domain.Quota, 0, len(w.Quotas))
	for _, q := range w.Quotas {
		out = append(out, domain.Quota{Project: q.Project, Pool: q.Pool,
			Guaranteed:  domain.Limits{GPUs: q.GPUs, CPUs: q.CPUs, Memory: q.Memory, Jobs: q.Jobs},
			Borrow:      domain.Limits{GPUs: q.Borrow.GPUs, CPUs: q.Borrow.CPUs, Memory: q.Borrow.Memory, Jobs: q.Borrow.Jobs},
			MaxPriority: q.MaxPriority})
	}
	return out
}

func (w *Workload) domainProjects() []domain.Project {
	out := make([]domain.Project, 0, len(w.Projects))
	for _, p := range w.Projects {
		out = append(out, domain.Project{Name: p.Name, Shares: p.Shares})
	}
	return out
}
