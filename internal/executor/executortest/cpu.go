package executortest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CPU is CPU time in milliseconds, read from /proc, for benchmarks that
// compare an executor with its engine driven directly: Procs by process
// (this one as "self", and every process whose command line names a
// directory, such as an engine's daemons, by its program's name),
// Children this process's reaped children (the commands it ran), and
// Machine the whole machine's busy time.
type CPU struct {
	Procs    map[string]int64
	Children int64
	Machine  int64
}

// CPUNow reads the CPU time used so far by this process, its reaped
// children, the processes whose command line names dir, and the machine.
func CPUNow(dir string) CPU {
	u := CPU{Procs: map[string]int64{"self": procCPU("self", 14, 15)}, Children: procCPU("self", 16, 17), Machine: machineCPU()}
	self := strconv.Itoa(os.Getpid())
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == self {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmd), dir) {
			continue
		}
		name, _, _ := strings.Cut(string(cmd), "\x00")
		u.Procs[filepath.Base(name)] += procCPU(e.Name(), 14, 15)
	}
	return u
}

// userHZ is the unit of the CPU times in /proc/PID/stat: Linux fixes it
// at 100 for user space.
const userHZ = 100

// ProcessCPU is the user and system CPU time process pid has used so
// far (its threads, ended ones included; not its children's).
func ProcessCPU(pid int) (time.Duration, error) {
	f, err := statFields(strconv.Itoa(pid))
	if err != nil {
		return 0, err
	}
	return ticks(f, 14, 15), nil
}

// procCPU is fields i and j (numbered as in proc(5)) of /proc/pid/stat
// together, in ms; 0 when the process is gone.
func procCPU(pid string, i, j int) int64 {
	f, err := statFields(pid)
	if err != nil {
		return 0
	}
	return ticks(f, i, j).Milliseconds()
}

// statFields reads /proc/pid/stat ("self" for this process) and returns
// its fields from the third (the state) on: field n is at n-3. The
// command name (field 2) may hold spaces and parentheses, so they are
// counted from its last ')'.
func statFields(pid string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return nil, err
	}
	s := string(b)
	k := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[k+1:])
	if k < 0 || len(f) < 15 {
		return nil, fmt.Errorf("/proc/%s/stat is not as proc(5) describes it: %q", pid, s)
	}
	return f, nil
}

// ticks is fields i and j of f (as statFields returns them), clock
// ticks, as a duration.
func ticks(f []string, i, j int) time.Duration {
	a, _ := strconv.ParseInt(f[i-3], 10, 64)
	c, _ := strconv.ParseInt(f[j-3], 10, 64)
	return time.Duration(a+c) * time.Second / userHZ
}

// machineCPU is the machine's busy time in ms: the first line of
// /proc/stat less idle and iowait.
func machineCPU() int64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var t int64
	for k, f := range strings.Fields(line)[1:] {
		if k == 3 || k == 4 { // idle, iowait
			continue
		}
		v, _ := strconv.ParseInt(f, 10, 64)
		t += v
	}
	return t * 1000 / userHZ
}

// Sub is u less v: the CPU time used between two readings.
func (u CPU) Sub(v CPU) CPU {
	d := CPU{Procs: map[string]int64{}, Children: u.Children - v.Children, Machine: u.Machine - v.Machine}
	for k, x := range u.Procs {
		d.Procs[k] = x - v.Procs[k]
	}
	return d
}

// Add adds v to u.
func (u *CPU) Add(v CPU) {
	if u.Procs == nil {
		u.Procs = map[string]int64{}
	}
	for k, x := range v.Procs {
		u.Procs[k] += x
	}
	u.Children += v.Children
	u.Machine += v.Machine
}

// Total is the CPU time of the processes in Procs.
func (u CPU) Total() int64 {
	var t int64
	for _, x := range u.Procs {
		t += x
	}
	return t
}

// PerJob writes u per job: each process's, then their total. With rest,
// also the children's and the rest of the machine's (what neither this
// process, its children nor the named processes used: an engine's
// short-lived processes, such as the jobs' own), and the machine's.
func (u CPU) PerJob(jobs float64, rest bool) string {
	var parts []string
	for k, x := range u.Procs {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(x)/jobs))
	}
	slices.Sort(parts)
	s := strings.Join(parts, ", ") + fmt.Sprintf(" (total %.2f)", float64(u.Total())/jobs)
	if rest {
		s += fmt.Sprintf("; children %.2f, rest of the machine %.2f (machine %.2f)", float64(u.Children)/jobs,
			float64(u.Machine-u.Total()-u.Children)/jobs, float64(u.Machine)/jobs)
	}
	return s
}
