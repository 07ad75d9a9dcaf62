package slurm

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

// TestSbatchArgsNodes: an attempt of several nodes asks for them, one
// task each, with the per-node GPUs the most any of its nodes has.
func TestSbatchArgsNodes(t *testing.T) {
	e := &Executor{cfg: Config{NamePrefix: "trainyard"}}
	for _, tc := range []struct {
		l    executor.Launch
		want []string
	}{
		{executor.Launch{Resources: domain.Resources{CPUs: 2}}, []string{"--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=2"}},
		{executor.Launch{Resources: domain.Resources{CPUs: 4, GPUs: 1, Nodes: 3}}, []string{"--nodes=3", "--ntasks-per-node=1", "--cpus-per-task=4", "--gres=gpu:1"}},
		{executor.Launch{Resources: domain.Resources{CPUs: 1}, Placement: executor.Placement{Nodes: []executor.PlacedNode{{Name: "a", GPUs: []int{2}}, {Name: "b", GPUs: []int{0, 1}}}}},
			[]string{"--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1", "--gres=gpu:2"}},
	} {
		tc.l.Dir = "/runs/a"
		got := e.sbatchArgs(tc.l)
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("sbatchArgs(%+v) = %q, want %s among them", tc.l.Resources, got, w)
			}
		}
	}
}

// fakeSlurm writes stand-ins for srun, scancel and scontrol into dir: srun
// runs its program once per task in the background, with SLURM_PROCID
// set, and waits for them; scancel records its arguments and makes the
// tasks' stop file; scontrol names two nodes.
func fakeSlurm(t *testing.T, dir string) clients {
	t.Helper()
	scripts := map[string]string{
		"srun": `n=1
while :; do
	case $1 in
	--ntasks=*) n=${1#--ntasks=}; shift ;;
	--cpus-per-task=*) SLURM_CPUS_PER_TASK=${1#--cpus-per-task=}; export SLURM_CPUS_PER_TASK; shift ;;
	--*) shift ;;
	*) break ;;
	esac
done
i=0
while [ "$i" -lt "$n" ]; do
	SLURM_PROCID=$i "$@" &
	i=$((i + 1))
done
wait
exit 3
`,
		"scancel":  `echo "$@" >> "$FAKE_DIR/scancel.args"; : > "$FAKE_DIR/stop"`,
		"scontrol": `[ "$*" = "show hostnames $SLURM_JOB_NODELIST" ] && printf 'node-a\nnode-b\n'`,
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return clients{srun: filepath.Join(dir, "srun"), scancel: filepath.Join(dir, "scancel"), scontrol: filepath.Join(dir, "scontrol")}
}

// launch starts l's argv as the supervisor would, with env (the launch
// record's environment) and c (fake Slurm commands in dir); the output
// goes to dir/out.
func launch(t *testing.T, l executor.Launch, env []string, dir string, c clients) *exec.Cmd {
	t.Helper()
	l = multiNode(l, 2, 29555, c)
	if l.StopSignalTo != domain.StopMain {
		t.Errorf("StopSignalTo = %q, want the launcher alone (srun kills its tasks on SIGTERM)", l.StopSignalTo)
	}
	cmd := exec.Command(l.Argv[0], l.Argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(env, "FAKE_DIR="+dir, "SLURM_JOB_ID=7", "SLURM_JOB_NODELIST=node-[a-b]")
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// output is what the launcher in dir has printed so far.
func output(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLauncherRanks runs the launcher and the rank wrapper in a real
// shell: each task gets its rank over the record's single-node values,
// the first node as MASTER_ADDR, and the job's arguments as given.
func TestLauncherRanks(t *testing.T) {
	script := `echo "$RANK $NODE_RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $SLURM_CPUS_PER_TASK $KEEP|$#|$*"`
	args := []string{"a  b", "$(touch pwned)", "it's", "`touch pwned`", `"q"`, ""}
	l := executor.Launch{Argv: append([]string{"/bin/sh", "-c", script, "job"}, args...), Resources: domain.Resources{CPUs: 2.5}}
	// The record's values for a single node, which the launcher replaces.
	env := []string{"PATH=/usr/bin:/bin", "RANK=0", "NODE_RANK=0", "WORLD_SIZE=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1", "KEEP=kept"}
	dir := t.TempDir()
	cmd := launch(t, l, env, dir, fakeSlurm(t, dir))
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Errorf("launcher ended with %v, want srun's status 3", err)
	}
	lines := strings.Split(strings.TrimSuffix(output(t, dir), "\n"), "\n")
	slices.Sort(lines)
	tail := "|6|" + strings.Join(args, " ")
	want := []string{"0 0 2 0 1 node-a 29555 3 kept" + tail, "1 1 2 0 1 node-a 29555 3 kept" + tail}
	if !slices.Equal(lines, want) {
		t.Errorf("tasks printed\n%q\nwant\n%q", lines, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
		t.Error("an argument ran as shell text")
	}
}

// TestLauncherNoNodes: without a node name for MASTER_ADDR the launcher
// says so, and starts nothing.
func TestLauncherNoNodes(t *testing.T) {
	dir := t.TempDir()
	c := fakeSlurm(t, dir)
	if err := os.WriteFile(c.scontrol, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := launch(t, executor.Launch{Argv: []string{"/bin/echo", "ran"}}, []string{"PATH=/usr/bin:/bin"}, dir, c)
	err := cmd.Wait()
	if out := output(t, dir); err == nil || strings.Contains(out, "ran") || !strings.Contains(out, "MASTER_ADDR") {
		t.Errorf("launcher said %q (%v), want a failure naming MASTER_ADDR, and no task run", out, err)
	}
}

// TestLauncherForwardsStop: SIGTERM to the launcher goes to the tasks
// through scancel, not to srun (which would kill them), and the
// launcher waits for srun and ends with its status.
func TestLauncherForwardsStop(t *testing.T) {
	l := executor.Launch{Argv: []string{"/bin/sh", "-c", `echo "up $RANK"; while [ ! -e "$FAKE_DIR/stop" ]; do sleep 0.02; done; echo "bye $RANK"`}}
	dir := t.TempDir()
	cmd := launch(t, l, []string{"PATH=/usr/bin:/bin"}, dir, fakeSlurm(t, dir))
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(output(t, dir), "up ") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the tasks did not start: %q", output(t, dir))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Errorf("launcher ended with %v, want srun's status 3 (%q)", err, output(t, dir))
	}
	b, _ := os.ReadFile(filepath.Join(dir, "scancel.args"))
	if got := strings.TrimSpace(string(b)); got != "--signal=TERM 7" {
		t.Errorf("scancel got %q, want --signal=TERM 7", got)
	}
	for _, w := range []string{"bye 0", "bye 1"} {
		if out := output(t, dir); !strings.Contains(out, w) {
			t.Errorf("output %q lacks %q", out, w)
		}
	}
}
