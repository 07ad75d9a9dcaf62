package cgroup

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// trackings are the hierarchies this machine offers to track attempts in,
// by the kind of kill each exercises.
func trackings(t *testing.T) map[string]Hierarchy {
	t.Helper()
	out := map[string]Hierarchy{}
	var whys []string
	for _, mount := range []string{DefaultMount, filepath.Join(DefaultMount, "unified")} {
		if h, err := DetectTracking(mount); err == nil && h.Version == V2 {
			out["v2 cgroup.kill"] = h
			out["v2 freeze"] = h
			break
		} else if err != nil {
			whys = append(whys, err.Error())
		}
	}
	for _, c := range []string{"freezer", "pids"} {
		if h, err := DetectTracking(filepath.Join(DefaultMount, c)); err == nil {
			out["v1 "+c] = h
		} else {
			whys = append(whys, err.Error())
		}
	}
	if h, err := Detect(filepath.Join(DefaultMount, "memory")); err == nil {
		out["v1 memory"] = h
	} else {
		whys = append(whys, err.Error())
	}
	if len(out) == 0 {
		msg := "no writable cgroup hierarchy here: " + strings.Join(whys, "; ")
		if os.Getenv("CI") != "" {
			t.Fatal(msg + "; CI machines must have one")
		}
		t.Skip(msg)
	}
	return out
}

// TestAttemptKillEndsEveryProcess: a job that forks children, a setsid
// child, a double-forked daemon and keeps forking is ended entirely by
// Kill, whatever the hierarchy, and Remove leaves no group behind.
func TestAttemptKillEndsEveryProcess(t *testing.T) {
	for kind, h := range trackings(t) {
		t.Run(kind, func(t *testing.T) {
			if kind == "v2 freeze" {
				if !exists(filepath.Join(h.Parent, "cgroup.freeze")) && !exists(filepath.Join(h.Mount, "cgroup.freeze")) {
					t.Skip("this kernel has no cgroup.freeze")
				}
				useCgroupKill = false
				t.Cleanup(func() { useCgroupKill = true })
			}
			a, err := Layout{Track: &h}.Plan("test-kill-"+strconv.Itoa(os.Getpid()), Limits{})
			if err != nil || a == nil {
				t.Fatalf("Plan = %v, %v", a, err)
			}
			if err := a.Create(); err != nil {
				t.Fatal(err)
			}
			defer a.Remove(time.Second)
			if err := a.EnterShim(); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("/bin/sh", "-c", `
				sleep 300 &
				setsid sleep 300 &
				sh -c 'sleep 300 & exit 0' &
				while :; do sleep 300 & sleep 0.02; done`)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := a.StartInJob(func(fd int) error {
				if fd >= 0 { // a v2 hierarchy: born in the job's group
					cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
				}
				return cmd.Start()
			}); err != nil {
				t.Fatal(err)
			}
			go cmd.Wait()
			job := a.jobDir(h)
			var before []int
			waitUntil(t, "the job's processes to start", func() bool {
				before, _ = treePids(job, os.Getpid())
				return len(before) >= 6
			})
			if own, _ := treePids(a.shimDir(h), 0); len(own) != 1 || own[0] != os.Getpid() {
				t.Errorf("supervisor's group holds %v, want only the caller %d", own, os.Getpid())
			}
			start := time.Now()
			if err := a.Kill(5 * time.Second); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d processes ended in %s", len(before), time.Since(start))
			for _, pid := range before {
				if !zombie(pid) {
					t.Errorf("pid %d of the job still runs after Kill", pid)
				}
			}
			if err := a.Remove(time.Second); err != nil {
				t.Fatal(err)
			}
			for _, d := range a.Dirs() {
				if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("group %s still exists after Remove: %v", d, err)
				}
			}
		})
	}
}

// TestPlan: the memory limit goes where a memory controller is; a v2
// hierarchy that tracks and limits appears once.
func TestPlan(t *testing.T) {
	v2 := Hierarchy{Version: V2, Mount: "/cg", Parent: "/cg/trainyard", Memory: true}
	freezer := Hierarchy{Version: V1, Mount: "/cg/freezer", Parent: "/cg/freezer/trainyard", Controller: "freezer"}
	mem := Hierarchy{Version: V1, Mount: "/cg/memory", Parent: "/cg/memory/trainyard", Controller: "memory", Memory: true}
	v2cpu := Hierarchy{Version: V2, Mount: "/cg", Parent: "/cg/trainyard", CPU: true}
	cpu := Hierarchy{Version: V1, Mount: "/cg/cpu", Parent: "/cg/cpu/trainyard", Controller: "cpu", CPU: true}
	cases := map[string]struct {
		l     Layout
		limit int64
		cpus  float64
		want  []string // the attempt's job groups; nil: no attempt
		mem   string   // the memory-limited group; "": none
		acct  string   // the group that accounts memory; "": none
		cpu   string   // the CPU-limited group; "": none
	}{
		"v2 with limit":      {Layout{Track: &v2, Memory: &v2}, 1 << 20, 0, []string{"/cg/trainyard/a"}, "/cg/trainyard/a", "/cg/trainyard/a", ""},
		"v2 without limit":   {Layout{Track: &v2, Memory: &v2}, 0, 0, []string{"/cg/trainyard/a"}, "", "/cg/trainyard/a", ""},
		"v2 with cpus":       {Layout{Track: &v2, Memory: &v2, CPU: &v2cpu}, 0, 1.5, []string{"/cg/trainyard/a"}, "", "/cg/trainyard/a", "/cg/trainyard/a"},
		"v1 with limit":      {Layout{Track: &freezer, Memory: &mem}, 1 << 20, 0, []string{"/cg/freezer/trainyard/a", "/cg/memory/trainyard/a"}, "/cg/memory/trainyard/a", "/cg/memory/trainyard/a", ""},
		"v1 without limit":   {Layout{Track: &freezer, Memory: &mem}, 0, 0, []string{"/cg/freezer/trainyard/a", "/cg/memory/trainyard/a"}, "", "/cg/memory/trainyard/a", ""},
		"v1 with cpus":       {Layout{Track: &freezer, Memory: &mem, CPU: &cpu}, 0, 1, []string{"/cg/freezer/trainyard/a", "/cg/memory/trainyard/a", "/cg/cpu/trainyard/a"}, "", "/cg/memory/trainyard/a", "/cg/cpu/trainyard/a"},
		"v1 cpu, no cpus":    {Layout{Track: &freezer, CPU: &cpu}, 0, 0, []string{"/cg/freezer/trainyard/a"}, "", "", ""},
		"memory only, limit": {Layout{Memory: &mem}, 1 << 20, 0, []string{"/cg/memory/trainyard/a"}, "/cg/memory/trainyard/a", "/cg/memory/trainyard/a", ""},
		"memory only, none":  {Layout{Memory: &mem}, 0, 0, []string{"/cg/memory/trainyard/a"}, "", "/cg/memory/trainyard/a", ""},
		"nothing":            {Layout{}, 1 << 20, 2, nil, "", "", ""},
	}
	for name, tc := range cases {
		a, err := tc.l.Plan("a", Limits{Memory: tc.limit, CPUs: tc.cpus})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got []string
		if a != nil {
			for _, h := range a.Hierarchies {
				got = append(got, a.jobDir(h))
			}
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s: job groups %v, want %v", name, got, tc.want)
		}
		gotMem := ""
		if a != nil && a.MemoryGroup() != nil {
			gotMem = a.MemoryGroup().Path()
		}
		if gotMem != tc.mem {
			t.Errorf("%s: memory group %q, want %q", name, gotMem, tc.mem)
		}
		gotAcct, gotCPU := "", ""
		if a != nil && a.MemoryAccount() != nil {
			gotAcct = a.MemoryAccount().Path()
		}
		if a != nil && a.CPUGroup() != nil {
			gotCPU = a.CPUGroup().Path()
		}
		if gotAcct != tc.acct || gotCPU != tc.cpu {
			t.Errorf("%s: memory accounted in %q, CPU limited in %q; want %q, %q", name, gotAcct, gotCPU, tc.acct, tc.cpu)
		}
	}
	if _, err := (Layout{Track: &v2}).Plan("../x", Limits{}); err == nil {
		t.Error("Plan accepted a name with a slash")
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
