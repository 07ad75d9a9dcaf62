package slurm

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

// A multi-node attempt is one job of N nodes, one task per node. Its
// batch step, on the first node, runs the supervisor as a single-node
// attempt's does; the program the supervisor starts is the launcher
// (launcher below), which runs the job's argv once per node with srun,
// each under the rank wrapper, which gives it its rank.
//
// srun answers SIGTERM, SIGINT, SIGHUP and SIGQUIT by killing its tasks
// outright (SIGKILL), so the stop and warning signals must not reach it:
// the supervisor signals the launcher alone (StopMain), which has Slurm
// deliver the signal to the tasks (scancel --signal, which spares the
// batch step), where the job's handlers run. The SIGKILL after the grace
// goes to the launcher's whole process group, srun with it; any task
// left then ends with the job, which ends with its batch step.

// launcher runs srun in the batch step. Its arguments: srun, scancel and
// scontrol as the nodes find them, the number of nodes, the CPUs of each
// (the job's: without them srun would give each task one, which CPU
// binding enforces), MASTER_PORT, then the job's argv, which it never
// reads as shell text. MASTER_ADDR is the first node of the job, where
// rank 0 runs: every rank gets the same. The variables it exports reach
// every task (srun --export=ALL) and replace the single-node values of
// the launch record.
const launcher = `srun=$1 scancel=$2 scontrol=$3 nodes=$4 cpus=$5 port=$6
shift 6
hosts=$("$scontrol" show hostnames "$SLURM_JOB_NODELIST")
read -r MASTER_ADDR <<HOSTS
$hosts
HOSTS
if [ -z "$MASTER_ADDR" ]; then
	echo "trainyard: cannot name the job's first node for MASTER_ADDR: scontrol show hostnames '$SLURM_JOB_NODELIST' gave none" >&2
	exit 1
fi
MASTER_PORT=$port WORLD_SIZE=$nodes LOCAL_RANK=0 LOCAL_WORLD_SIZE=1
export MASTER_ADDR MASTER_PORT WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE
for sig in TERM INT HUP QUIT USR1 USR2 ALRM URG WINCH CONT; do
	trap '"$scancel" --signal='$sig' "$SLURM_JOB_ID"' $sig
done
"$srun" --kill-on-bad-exit=1 --nodes="$nodes" --ntasks="$nodes" --ntasks-per-node=1 \
	--cpus-per-task="$cpus" --export=ALL /bin/sh -c "$rank" trainyard-rank "$@" &
pid=$!
# wait returns early when a trapped signal arrives: wait again while srun
# runs. Once it has ended, wait once more: if srun ended while a signal
# was being handled, the wait that signal cut short did not collect its
# status, and this one does; if the last wait collected it, the shell no
# longer knows srun and answers 127.
while :; do
	wait "$pid"
	status=$?
	kill -0 "$pid" 2>/dev/null && continue
	wait "$pid" 2>/dev/null
	last=$?
	[ "$last" -eq 127 ] || status=$last
	exit "$status"
done
`

// rankWrapper runs one task of a multi-node attempt: the job's argv
// (its arguments) with the task's rank, one task per node.
const rankWrapper = `RANK=$SLURM_PROCID NODE_RANK=$SLURM_PROCID
if [ -z "$RANK" ]; then
	echo "trainyard: SLURM_PROCID is not set: run under srun" >&2
	exit 1
fi
export RANK NODE_RANK
exec "$@"`

// clients are the Slurm commands the launcher runs, as the nodes find
// them.
type clients struct{ srun, scancel, scontrol string }

// findClients finds srun, scancel and scontrol in this machine's PATH,
// where the nodes must have them too: the job's environment need not
// have them in its PATH.
func findClients() (clients, error) {
	var paths [3]string
	for i, name := range []string{"srun", "scancel", "scontrol"} {
		p, err := exec.LookPath(name)
		if err == nil {
			p, err = filepath.Abs(p)
		}
		if err != nil {
			return clients{}, fmt.Errorf("multi-node attempts need %s, at the same path here and on the nodes: %w", name, err)
		}
		paths[i] = p
	}
	return clients{srun: paths[0], scancel: paths[1], scontrol: paths[2]}, nil
}

// multiNode is l as the supervisor runs it on an n-node job: its argv
// becomes the launcher's, which runs l's argv on every node, and its
// stop signal goes to the launcher alone (see above).
func multiNode(l executor.Launch, n, port int, c clients) executor.Launch {
	argv := []string{"/bin/sh", "-c", "rank=" + quote(rankWrapper) + "\n" + launcher, "trainyard-launcher",
		c.srun, c.scancel, c.scontrol, strconv.Itoa(n), strconv.Itoa(cpusPerNode(l)), strconv.Itoa(port)}
	l.Argv = append(argv, l.Argv...)
	l.StopSignalTo = domain.StopMain
	return l
}
