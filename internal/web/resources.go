package web

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// resourceCharts draws what the job's latest attempt uses, from the
// readings the server keeps of it while it runs and for a while after
// (service.JobService.ResourceHistory): the CPU cores it used between two
// readings, its memory (and its limit, when it has one), and the
// utilisation of each of its GPUs. "" when none are kept: the job has not
// run, ended a while ago, or this server samples nothing.
func (h *handler) resourceCharts(r *http.Request, v *viewer, id int64) (string, error) {
	rs, err := h.svc.Jobs.ResourceHistory(r.Context(), v.p, id, 0)
	if err != nil || len(rs) == 0 {
		return "", err
	}
	t0 := rs[0].At
	x := func(t time.Time) float64 { return t.Sub(t0).Minutes() }
	xLabel := "minutes since " + t0.UTC().Format("15:04 UTC")

	var cpu, rss, limit []point
	gpus := map[int][]point{}
	for i, s := range rs {
		if i > 0 {
			// Cores used: CPU seconds per second since the reading before.
			// A drop (the source changed from /proc to the cgroup, or back)
			// says nothing of the interval.
			dt, dc := s.At.Sub(rs[i-1].At).Seconds(), s.CPUSeconds-rs[i-1].CPUSeconds
			if dt > 0 && dc >= 0 {
				cpu = append(cpu, point{X: x(s.At), Y: dc / dt})
			}
		}
		rss = append(rss, point{X: x(s.At), Y: float64(s.RSSBytes) / (1 << 30)})
		if s.MemoryLimit > 0 {
			limit = append(limit, point{X: x(s.At), Y: float64(s.MemoryLimit) / (1 << 30)})
		}
		for g, u := range s.GPUUtil {
			gpus[g] = append(gpus[g], point{X: x(s.At), Y: 100 * u})
		}
	}

	var b strings.Builder
	chart := func(title string, yFmt func(float64) string, ss ...series) {
		b.WriteString(`<figure class="chart-box">`)
		b.WriteString(string(svgChart(title, xLabel, yFmt, ss...)))
		b.WriteString(`</figure>`)
	}
	chart("CPU cores used (latest attempt)", nil, series{Name: "cores", Points: cpu})
	mem := []series{{Name: "resident", Points: rss}}
	if len(limit) > 0 {
		mem = append(mem, series{Name: "limit", Points: limit})
	}
	chart("Memory, GiB (latest attempt)", nil, mem...)
	if len(gpus) > 0 {
		idx := make([]int, 0, len(gpus))
		for g := range gpus {
			idx = append(idx, g)
		}
		slices.Sort(idx)
		ss := make([]series, len(idx))
		for i, g := range idx {
			ss[i] = series{Name: "GPU " + strconv.Itoa(g), Points: gpus[g]}
		}
		chart("GPU utilisation, % (latest attempt)", func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) + "%" }, ss...)
	}
	return b.String(), nil
}
