package jobspec

import (
	"fmt"
	"maps"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"trainyard/internal/domain"
)

// Workflow fields of a spec: after: (dependencies) and sweep:.
var (
	afterFields     = []string{"job", "sweep", "on"}
	sweepFields     = []string{"method", "params", "count", "seed", "max_parallel", "objective", "early_stop"}
	earlyStopFields = []string{"rule", "min_steps", "min_members"}
	sweepParamField = []string{"values", "min", "max", "log"}
	objectiveFields = []string{"metric", "goal"}
)

// Limits of the workflow fields.
const (
	// MaxAfter bounds the entries of after:.
	MaxAfter = 64
	// MaxSweepMembers bounds the members of one sweep or array.
	MaxSweepMembers = 10000
)

// after decodes after: [{job: 12, on: succeeded}, {sweep: 3}].
func (d *decoder) after(p string, v *yaml.Node, s *domain.Spec) {
	if deps, ok := mappingList(d, p, v, "{job: ID, on: succeeded|ended|failed}", afterFields, func(dep *domain.Dependency, key, p string, v *yaml.Node) {
		switch key {
		case "job":
			d.id(p, v, &dep.Job)
		case "sweep":
			d.id(p, v, &dep.Sweep)
		case "on":
			var on string
			d.str(p, v, &on)
			dep.On = domain.DependOn(on)
		}
	}); ok {
		s.After = deps
	}
}

// id decodes a positive id.
func (d *decoder) id(p string, v *yaml.Node, dst *int64) {
	var n int
	if d.integer(p, v, &n) {
		*dst = int64(n)
	}
}

// sweep decodes sweep:.
func (d *decoder) sweep(p string, v *yaml.Node, s *domain.Spec) {
	sw := &domain.SweepSpec{}
	d.fields(p, v, sweepFields, func(key, p string, v *yaml.Node) {
		switch key {
		case "method":
			d.str(p, v, &sw.Method)
		case "count":
			d.integer(p, v, &sw.Count)
		case "seed":
			d.id(p, v, &sw.Seed)
		case "max_parallel":
			d.integer(p, v, &sw.MaxParallel)
		case "objective":
			sw.Objective = &domain.Objective{}
			d.fields(p, v, objectiveFields, func(key, p string, v *yaml.Node) {
				switch key {
				case "metric":
					d.str(p, v, &sw.Objective.Metric)
				case "goal":
					d.str(p, v, &sw.Objective.Goal)
				}
			})
		case "early_stop":
			sw.EarlyStop = &domain.EarlyStop{}
			d.fields(p, v, earlyStopFields, func(key, p string, v *yaml.Node) {
				switch key {
				case "rule":
					d.str(p, v, &sw.EarlyStop.Rule)
				case "min_steps":
					d.id(p, v, &sw.EarlyStop.MinSteps)
				case "min_members":
					d.integer(p, v, &sw.EarlyStop.MinMembers)
				}
			})
		case "params":
			sw.Params = map[string]domain.SweepParam{}
			d.entries(p, v, func(name, kp string, _, v *yaml.Node) {
				v = resolve(v)
				var sp domain.SweepParam
				switch {
				case v != nil && v.Kind == yaml.SequenceNode: // a list is its values
					sp.Values = d.strings(kp, v, "a list of values")
				case v != nil && v.Kind == yaml.MappingNode:
					d.fields(kp, v, sweepParamField, func(key, p string, v *yaml.Node) {
						var f float64
						switch key {
						case "values":
							sp.Values = d.strings(p, v, "a list of values")
						case "min":
							if d.number(p, v, &f) {
								sp.Min = &f
							}
						case "max":
							if d.number(p, v, &f) {
								sp.Max = &f
							}
						case "log":
							d.boolean(p, v, &sp.Log)
						}
					})
				default:
					d.fail(kp, v, "must be a list of values, e.g. [0.1, 0.01], or {min: 0.0001, max: 0.1, log: true}, got %s", describe(v))
					return
				}
				sw.Params[name] = sp
			})
		}
	})
	if sw.Method == "" {
		sw.Method = domain.SweepGrid
		if sw.Count > 0 {
			sw.Method = domain.SweepRandom
		}
	}
	s.Sweep = sw
}

// checkAfter checks the entries of after:.
func checkAfter(es *domain.FieldErrors, after []domain.Dependency) {
	if len(after) > MaxAfter {
		es.Add("after", "has %d entries; at most %d (depend on a sweep to wait for many jobs)", len(after), MaxAfter)
		return
	}
	for i, d := range after {
		p := fmt.Sprintf("after[%d]", i)
		switch {
		case d.Job == 0 && d.Sweep == 0:
			es.Add(p, "names no job; give job: ID (or sweep: ID)")
		case d.Job != 0 && d.Sweep != 0:
			es.Add(p, "names both a job and a sweep; give one entry each")
		case d.Job < 0:
			es.Add(p+".job", "must be a job id (a positive number), got %d", d.Job)
		case d.Sweep < 0:
			es.Add(p+".sweep", "must be a sweep id (a positive number), got %d", d.Sweep)
		}
		if !slices.Contains(domain.DependOns(), d.On) {
			es.Add(p+".on", "%q is not a condition; use one of %s", d.On, joinOns())
		}
		for j := range i {
			if after[j].Job == d.Job && after[j].Sweep == d.Sweep && (d.Job != 0 || d.Sweep != 0) {
				es.Add(p, "repeats after[%d]; name each job or sweep once", j)
				break
			}
		}
	}
}

func joinOns() string {
	var names []string
	for _, o := range domain.DependOns() {
		names = append(names, string(o))
	}
	return strings.Join(names, ", ")
}

// CheckSweep checks sweep: against the spec's params.
func CheckSweep(es *domain.FieldErrors, sw *domain.SweepSpec) {
	if sw == nil {
		return
	}
	switch sw.Method {
	case domain.SweepGrid, domain.SweepRandom, domain.SweepArray:
	default:
		es.Add("sweep.method", "%q is not a method; use grid (every combination) or random (count samples)", sw.Method)
		return
	}
	if sw.MaxParallel < 0 {
		es.Add("sweep.max_parallel", "must be 0 (no limit) or more, got %d", sw.MaxParallel)
	}
	if o := sw.Objective; o != nil {
		if o.Metric == "" {
			es.Add("sweep.objective.metric", "is required; name the metric the members report, e.g. val_loss")
		} else if len(o.Metric) > 128 || domain.TextProblem(o.Metric, false) != "" {
			es.Add("sweep.objective.metric", "is not a metric name: at most 128 printable characters on one line")
		}
		if o.Goal == "" {
			o.Goal = "minimize"
		}
		if o.Goal != "minimize" && o.Goal != "maximize" {
			es.Add("sweep.objective.goal", "%q is not a goal; use minimize or maximize", o.Goal)
		}
	}
	if e := sw.EarlyStop; e != nil {
		if e.Rule == "" {
			e.Rule = "median"
		}
		if e.Rule != "median" {
			es.Add("sweep.early_stop.rule", "%q is not a rule; use median", e.Rule)
		}
		if sw.Objective == nil {
			es.Add("sweep.early_stop", "needs sweep.objective: the metric that tells poor members from good ones")
		}
		if e.MinSteps < 0 {
			es.Add("sweep.early_stop.min_steps", "must be 0 or more, got %d", e.MinSteps)
		}
		if e.MinMembers == 0 {
			e.MinMembers = 3
		}
		if e.MinMembers < 1 {
			es.Add("sweep.early_stop.min_members", "must be 1 or more, got %d", e.MinMembers)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(sw.Params)) {
		p := "sweep.params." + name
		sp := sw.Params[name]
		if !paramRE.MatchString(name) {
			es.Add(p, "%q is not a valid parameter name: use letters, digits and '_', not starting with a digit", name)
		}
		ranged := sp.Min != nil || sp.Max != nil
		switch {
		case len(sp.Values) > 0 && ranged:
			es.Add(p, "gives both values and a range; give one")
		case ranged && sw.Method == domain.SweepGrid:
			es.Add(p, "is a range, which a grid cannot enumerate; list values, or use method: random with a count")
		case ranged && (sp.Min == nil || sp.Max == nil):
			es.Add(p, "needs both min and max")
		case ranged && *sp.Min > *sp.Max:
			es.Add(p, "min %v is above max %v", *sp.Min, *sp.Max)
		case ranged && sp.Log && *sp.Min <= 0:
			es.Add(p+".min", "must be above 0 for a log range, got %v", *sp.Min)
		case !ranged && len(sp.Values) == 0:
			es.Add(p, "has no values; list at least one")
		}
		for i, v := range sp.Values {
			if msg := textProblem(v); msg != "" {
				es.Add(fmt.Sprintf("%s.values[%d]", p, i), "%s, which an environment variable cannot hold", msg)
			}
		}
	}
	switch sw.Method {
	case domain.SweepGrid:
		if len(sw.Params) == 0 {
			es.Add("sweep.params", "is empty; list the values of at least one parameter, e.g. {lr: [0.1, 0.01]}")
		}
		if sw.Count != 0 {
			es.Add("sweep.count", "is for method: random; a grid runs every combination")
		}
		if n := gridSize(sw); n > MaxSweepMembers {
			es.Add("sweep.params", "make %d combinations; at most %d members per sweep", n, MaxSweepMembers)
		}
	case domain.SweepRandom:
		if sw.Count <= 0 || sw.Count > MaxSweepMembers {
			es.Add("sweep.count", "must be 1 to %d members, got %d", MaxSweepMembers, sw.Count)
		}
		if len(sw.Params) == 0 {
			es.Add("sweep.params", "is empty; give at least one parameter to draw")
		}
	case domain.SweepArray:
		if len(sw.Indices) == 0 || len(sw.Indices) > MaxSweepMembers {
			es.Add("sweep", "an array needs 1 to %d indices, got %d", MaxSweepMembers, len(sw.Indices))
		}
	}
}

func gridSize(sw *domain.SweepSpec) int {
	n := 1
	for _, sp := range sw.Params {
		n *= max(len(sp.Values), 1)
		if n > MaxSweepMembers {
			return n
		}
	}
	return n
}

// Member is one member of a sweep: its index and its params.
type Member struct {
	Index  int
	Params map[string]string
}

// Members expands a checked sweep into its members, in index order: a
// grid's combinations (the parameters in name order, the last varying
// fastest), random draws from seed, or an array's indices.
func Members(sw domain.SweepSpec) []Member {
	names := slices.Sorted(maps.Keys(sw.Params))
	switch sw.Method {
	case domain.SweepArray:
		out := make([]Member, len(sw.Indices))
		for i, idx := range sw.Indices {
			out[i] = Member{Index: idx}
		}
		return out
	case domain.SweepRandom:
		rng := newSplitMix(uint64(sw.Seed))
		out := make([]Member, sw.Count)
		for i := range out {
			m := Member{Index: i, Params: make(map[string]string, len(names))}
			for _, name := range names {
				sp := sw.Params[name]
				if len(sp.Values) > 0 {
					m.Params[name] = sp.Values[rng.intn(len(sp.Values))]
					continue
				}
				lo, hi, u := *sp.Min, *sp.Max, rng.float()
				x := lo + u*(hi-lo)
				if sp.Log {
					x = math.Exp(math.Log(lo) + u*(math.Log(hi)-math.Log(lo)))
				}
				m.Params[name] = strconv.FormatFloat(x, 'g', 6, 64)
			}
			out[i] = m
		}
		return out
	}
	n := gridSize(&sw)
	out := make([]Member, n)
	for i := range out {
		m := Member{Index: i, Params: make(map[string]string, len(names))}
		rest := i
		for k := len(names) - 1; k >= 0; k-- {
			vals := sw.Params[names[k]].Values
			m.Params[names[k]] = vals[rest%len(vals)]
			rest /= len(vals)
		}
		out[i] = m
	}
	return out
}

// splitMix is SplitMix64: a small generator whose sequence for a seed is
// fixed here, so a sweep's draws never change with the Go release.
type splitMix struct{ s uint64 }

func newSplitMix(seed uint64) *splitMix { return &splitMix{s: seed} }

func (r *splitMix) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (r *splitMix) float() float64 { return float64(r.next()>>11) / (1 << 53) }
func (r *splitMix) intn(n int) int { return int(r.next() % uint64(n)) }

// ParseArray reads an array's indices, as Slurm writes them: "0-31",
// "1,3,5-9", with an optional "%N" max_parallel suffix ("0-31%4").
func ParseArray(s string) (indices []int, maxParallel int, err error) {
	spec, limit, hasLimit := strings.Cut(strings.TrimSpace(s), "%")
	if hasLimit {
		if maxParallel, err = strconv.Atoi(limit); err != nil || maxParallel < 1 {
			return nil, 0, fmt.Errorf("array %q: %%%s is not a max_parallel; write e.g. 0-31%%4", s, limit)
		}
	}
	seen := map[int]bool{}
	for _, part := range strings.Split(spec, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(strings.TrimSpace(lo))
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(strings.TrimSpace(hi))
		}
		if err1 != nil || err2 != nil || a < 0 || b < a {
			return nil, 0, fmt.Errorf("array %q: %q is not an index or a range; write e.g. 0-31 or 1,3,5-9", s, part)
		}
		if b-a >= MaxSweepMembers {
			return nil, 0, fmt.Errorf("array %q has more than %d indices", s, MaxSweepMembers)
		}
		for i := a; i <= b; i++ {
			if !seen[i] {
				seen[i] = true
				indices = append(indices, i)
			}
		}
		if len(indices) > MaxSweepMembers {
			return nil, 0, fmt.Errorf("array %q has more than %d indices", s, MaxSweepMembers)
		}
	}
	return indices, maxParallel, nil
}

// checkFromJob checks an input that reads another job's outputs: path is
// relative to that job's output directory.
func checkFromJob(es *domain.FieldErrors, p string, in domain.Input) {
	switch {
	case in.FromJob < 0:
		es.Add(p+".from_job", "must be a job id (a positive number), got %d", in.FromJob)
	case in.Path == "":
	case textProblem(in.Path) != "":
		es.Add(p+".path", "%s, which a path cannot hold", textProblem(in.Path))
	case !path.IsAbs(in.Path) && slices.Contains(strings.Split(in.Path, "/"), ".."):
		es.Add(p+".path", "%q contains \"..\"; give a path inside job %d's outputs, e.g. model/", in.Path, in.FromJob)
	}
}

// afterValue reads --set after=12,13:ended,sweep/4 as the list after:
// holds: each entry a job id or sweep/ID, with an optional ":condition"
// (default succeeded). An empty value clears after:.
func afterValue(val string) (*yaml.Node, string) {
	seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	if strings.TrimSpace(val) == "" {
		return seq, ""
	}
	for _, part := range strings.Split(val, ",") {
		target, on, _ := strings.Cut(strings.TrimSpace(part), ":")
		if on == "" {
			on = string(domain.DependSucceeded)
		}
		key := "job"
		if t, ok := strings.CutPrefix(target, "sweep/"); ok {
			key, target = "sweep", t
		}
		if _, err := strconv.ParseInt(target, 10, 64); err != nil {
			return nil, fmt.Sprintf("%q is not a job id or sweep/ID; write e.g. after=12 or after=12:ended,sweep/4", part)
		}
		seq.Content = append(seq.Content, &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, {Kind: yaml.ScalarNode, Tag: "!!int", Value: target},
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: "on"}, {Kind: yaml.ScalarNode, Tag: "!!str", Value: on},
		}})
	}
	return seq, ""
}
