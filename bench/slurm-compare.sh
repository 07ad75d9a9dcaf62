#!/usr/bin/env bash
# slurm-compare.sh: the same trivial jobs through Trainyard and through a
# tuned single-node Slurm on this machine, in the same window, alternating.
#
#   bench/slurm-compare.sh [-n JOBS] [-r ROUNDS] [-c CLIENTS] [-p POLL] [-k]
#
# Each round runs JOBS jobs of `true` (1 CPU each, 16 CPUs declared on both
# sides) three times: through Trainyard's CLI (one `trainyard submit` per
# job), through its HTTP API (one POST per job, from one curl), and through
# Slurm's sbatch (one per job), CLIENTS submits at a time, each timed from
# the first submit until the system's own record of the last job's end:
# Trainyard's finished_at (from its API), Slurm's _job_complete line (in
# slurmctld's log, to the millisecond). Both sides are polled every POLL
# seconds only to learn that the round is over: a poll spawns processes
# (curl or squeue, and a shell), tens of milliseconds of CPU each here,
# which a tighter loop would take from whichever side the CPU bounds.
# Rounds repeat the three in turn; the medians and the ratios to Slurm are
# printed at the end, with the load average.
#
# Slurm runs as Debian's slurm-wlm packages it, tuned for throughput and
# started by hand in a scratch directory (no systemd, no accounting):
# SlurmctldHost and NodeName are `hostname -s`, NodeAddr 127.0.0.1, 16
# CPUs declared (SlurmdParameters=config_overrides),
# SchedulerParameters=batch_sched_delay=0,sched_min_interval=0. munged runs
# on a private socket with the installed key. Nothing outside the scratch
# directory is changed; everything started is stopped on exit.
#
# Needs root (slurmd runs jobs as their submitter and munged checks key
# ownership), Go (to build trainyard with CGO_ENABLED=0, as the container
# image does; or set TRAINYARD_BIN_DIR to a directory holding trainyard and
# trainyard-shim), curl, python3.
#
#   -n JOBS     jobs per round and system (default 1000)
#   -r ROUNDS   rounds per system (default 3)
#   -c CLIENTS  concurrent submits (default 4)
#   -p POLL     seconds between polls for a round's end (default 0.5)
#   -k          keep the scratch directory (logs, configs)
set -euo pipefail

jobs=1000 rounds=3 clients=4 poll=0.5 keep=0
while getopts "n:r:c:p:kh" o; do
	case $o in
	n) jobs=$OPTARG ;;
	r) rounds=$OPTARG ;;
	c) clients=$OPTARG ;;
	p) poll=$OPTARG ;;
	k) keep=1 ;;
	*) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
	esac
done

missing=()
for cmd in slurmctld slurmd sbatch squeue sinfo munged; do
	command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
done
if ((${#missing[@]})); then
	echo "Slurm is not installed here (missing: ${missing[*]}), so there is nothing to compare."
	echo "Install it (Debian/Ubuntu), then run this again:"
	echo "  sudo apt-get install -y slurm-wlm munge"
	exit 0
fi
if [[ $(id -u) != 0 ]]; then
	echo "slurm-compare.sh: run it as root (slurmd and munged need it): sudo $0 $*" >&2
	exit 2
fi
for cmd in curl python3; do
	command -v "$cmd" >/dev/null || { echo "slurm-compare.sh: $cmd is needed; install it" >&2; exit 2; }
done

repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/slurm-compare.XXXXXX")
chmod 0755 "$work"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
	done
	if ((keep)); then echo "scratch kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

say() { printf '%s\n' "$*" >&2; }

# ---- Trainyard ----
bin=${TRAINYARD_BIN_DIR:-}
if [[ -z $bin ]]; then
	bin=$work/bin
	say "building trainyard and trainyard-shim (static, as the container image)..."
	(cd "$repo" && CGO_ENABLED=0 go build -o "$bin/" ./cmd/trainyard ./cmd/trainyard-shim)
fi
ty=$bin/trainyard
mkdir -p "$work/ty/home"
cat >"$work/ty/server.yaml" <<EOF
inventory: {cpus: 16, memory: 256GiB, gpus: 0}
isolation: off
EOF
HOME=$work/ty/home XDG_CONFIG_HOME=$work/ty/home/.config \
	"$ty" server --data "$work/ty/data" --listen 127.0.0.1:0 --config "$work/ty/server.yaml" 2>"$work/ty/server.log" &
pids+=($!)
for _ in $(seq 300); do
	url=$(sed -n 's/.*"url": *"\([^"]*\)".*/\1/p' "$work/ty/data/server.json" 2>/dev/null || true)
	[[ -n $url ]] && break
	sleep 0.1
done
[[ -n ${url:-} ]] || { say "trainyard server did not start:"; cat "$work/ty/server.log" >&2; exit 1; }
export TRAINYARD_SERVER=$url TRAINYARD_TOKEN=$(cat "$work/ty/data/admin-token")
printf 'name: t\nresources: {cpus: 1, memory: 16MiB}\nentrypoint: [true]\n' >"$work/ty/true.yaml"

# ids counts the jobs in a JSON job list.
ids() { awk '{n += gsub(/"id":/, "")} END {print n + 0}'; }

# ty_active prints how many jobs are queued, starting or running.
ty_active() {
	curl -fsS -H "Authorization: Bearer $TRAINYARD_TOKEN" \
		"$TRAINYARD_SERVER/api/v1/jobs?state=queued,starting,running&limit=1" | ids
}

# ty_wait waits until no job is left queued, starting or running.
ty_wait() { until [[ $(ty_active) == 0 ]]; do sleep "$poll"; done; }

# ty_end prints when the last of the newest $jobs jobs (the round's)
# ended, in seconds since the epoch, from their finished_at.
ty_end() {
	python3 - "$jobs" <<'PY'
import datetime, json, os, sys, urllib.request

left, cursor, last = int(sys.argv[1]), "", 0.0
while left > 0:
    url = "%s/api/v1/jobs?limit=%d%s" % (os.environ["TRAINYARD_SERVER"], min(left, 1000), cursor)
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + os.environ["TRAINYARD_TOKEN"]})
    page = json.load(urllib.request.urlopen(req))
    for j in page["jobs"]:
        if not j.get("finished_at"):
            sys.exit("trainyard: job %d has not finished (%s)" % (j["id"], j["state"]))
        last = max(last, datetime.datetime.fromisoformat(j["finished_at"]).timestamp())
    left -= len(page["jobs"])
    if not page.get("next_cursor"):
        break
    cursor = "&cursor=" + page["next_cursor"]
print("%.6f" % last)
PY
}

# ty_cli_round submits through the CLI: one `trainyard submit` per job.
ty_cli_round() {
	local t0 t1
	t0=$(date +%s.%N)
	seq "$jobs" | xargs -P "$clients" -I{} "$ty" submit "$work/ty/true.yaml" >/dev/null 2>"$work/ty/submit.err" ||
		{ say "trainyard submit failed:"; tail -3 "$work/ty/submit.err" >&2; exit 1; }
	ty_wait
	t1=$(ty_end) || exit 1
	echo "$t0 $t1"
}

# ty_http_round submits through the HTTP API: one POST per job, from one
# curl process with $clients connections.
ty_http_round() {
	local t0 t1 ok
	t0=$(date +%s.%N)
	ok=$(curl -sS --no-progress-meter --parallel --parallel-max "$clients" -K "$work/ty/submits.curl" | grep -c '^201$' || true)
	((ok == jobs)) || { say "trainyard: $ok of $jobs HTTP submits answered 201"; exit 1; }
	ty_wait
	t1=$(ty_end) || exit 1
	echo "$t0 $t1"
}
printf '{"spec": "name: t\\nresources: {cpus: 1, memory: 16MiB}\\nentrypoint: [true]\\n"}' >"$work/ty/submit.json"
for i in $(seq "$jobs"); do
	printf 'url = "%s/api/v1/jobs"\nheader = "Authorization: Bearer %s"\nheader = "Content-Type: application/json"\n' "$TRAINYARD_SERVER" "$TRAINYARD_TOKEN"
	printf 'data-binary = "@%s"\noutput = "/dev/null"\nwrite-out = "%%{http_code}\\n"\n' "$work/ty/submit.json"
	((i < jobs)) && echo next
done >"$work/ty/submits.curl"

# ---- Slurm ----
host=$(hostname -s)
sl=$work/slurm
mkdir -p "$sl/state" "$sl/spool" "$sl/munge"
munged --socket="$sl/munge/munge.sock" --pid-file="$sl/munge/munged.pid" --log-file="$sl/munge/munged.log" \
	--seed-file="$sl/munge/munged.seed" --key-file=/etc/munge/munge.key --num-threads=4 --force
for _ in $(seq 50); do [[ -s $sl/munge/munged.pid ]] && break; sleep 0.1; done
pids+=("$(cat "$sl/munge/munged.pid")")
port=$((20000 + RANDOM % 20000))
cat >"$sl/slurm.conf" <<EOF
ClusterName=bench
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$sl/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$sl/state
SlurmdSpoolDir=$sl/spool
SlurmctldPidFile=$sl/slurmctld.pid
SlurmdPidFile=$sl/slurmd.pid
SlurmctldLogFile=$sl/slurmctld.log
SlurmdLogFile=$sl/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
MaxJobCount=100000
NodeName=$host NodeAddr=127.0.0.1 CPUs=16 RealMemory=262144 State=UNKNOWN
PartitionName=bench Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$sl/slurm.conf
slurmctld -c -f "$SLURM_CONF"
for _ in $(seq 100); do [[ -s $sl/slurmctld.pid ]] && break; sleep 0.1; done
pids+=("$(cat "$sl/slurmctld.pid")")
slurmd -f "$SLURM_CONF"
for _ in $(seq 100); do [[ -s $sl/slurmd.pid ]] && break; sleep 0.1; done
pids+=("$(cat "$sl/slurmd.pid")")
for _ in $(seq 300); do
	[[ $(sinfo -h -o %T 2>/dev/null) == idle ]] && break
	sleep 0.1
done
[[ $(sinfo -h -o %T 2>/dev/null) == idle ]] || { say "slurm did not become ready:"; tail -5 "$sl/slurmctld.log" "$sl/slurmd.log" >&2; exit 1; }
mkdir -p "$sl/jobs" && chmod 0777 "$sl/jobs"

# sl_round submits through sbatch, one per job, and ends at the last
# job's _job_complete line in slurmctld's log ("[2026-12-06T19:24:53.176]
# _job_complete: JobId=6 WEXITSTATUS 0").
sl_round() {
	local t0 t1 lines ends done last
	lines=$(wc -l <"$sl/slurmctld.log")
	t0=$(date +%s.%N)
	seq "$jobs" | xargs -P "$clients" -I{} sbatch -Q -n1 -c1 --mem=16M -o /dev/null -D "$sl/jobs" --wrap=true >/dev/null 2>"$sl/submit.err" ||
		{ say "sbatch failed:"; tail -3 "$sl/submit.err" >&2; exit 1; }
	until [[ $(squeue -h -o %i | wc -l) == 0 ]]; do sleep "$poll"; done
	ends=$(tail -n +"$((lines + 1))" "$sl/slurmctld.log" | grep '_job_complete: JobId=[0-9]* WEXITSTATUS' || true)
	done=$(grep -c 'WEXITSTATUS 0' <<<"$ends" || true)
	((done == jobs)) || { say "slurm: $done of $jobs jobs succeeded; see $sl/slurmctld.log (run with -k)"; exit 1; }
	last=$(tail -1 <<<"$ends" | sed -n 's/^\[\([0-9-]*\)T\([0-9:.]*\)\].*/\1 \2/p')
	[[ -n $last ]] || { say "slurm: no time on the last _job_complete line; see $sl/slurmctld.log (run with -k)"; exit 1; }
	t1=$(date -d "$last" +%s.%N) || exit 1
	echo "$t0 $t1"
}

rate() { awk -v n="$jobs" '{printf "%.1f", n/($2-$1)}'; }
median() { sort -g | awk '{a[NR]=$1} END{print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

say "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
cli_rates=() http_rates=() sl_rates=()
for r in $(seq "$rounds"); do
	c_rate=$(ty_cli_round | rate)
	h_rate=$(ty_http_round | rate)
	bad=$(curl -fsS -H "Authorization: Bearer $TRAINYARD_TOKEN" "$TRAINYARD_SERVER/api/v1/jobs?state=failed,canceled&limit=1" | ids)
	((bad == 0)) || { say "trainyard: some jobs did not succeed; see $work (run with -k)"; exit 1; }
	s_rate=$(sl_round | rate)
	say "round $r: trainyard CLI $c_rate jobs/s, trainyard HTTP $h_rate jobs/s, slurm $s_rate jobs/s (load $(cut -d' ' -f1 /proc/loadavg))"
	cli_rates+=("$c_rate") http_rates+=("$h_rate") sl_rates+=("$s_rate")
done
cm=$(printf '%s\n' "${cli_rates[@]}" | median)
hm=$(printf '%s\n' "${http_rates[@]}" | median)
sm=$(printf '%s\n' "${sl_rates[@]}" | median)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.1f", a/b}'; }
echo "$jobs jobs of \`true\` per run, 1 CPU each on 16 CPUs; $clients submits at a time; $rounds rounds, alternating"
echo "trainyard, CLI (trainyard submit):  $cm jobs/s (median)  $(ratio "$cm" "$sm")x slurm"
echo "trainyard, HTTP (POST /api/v1/jobs): $hm jobs/s (median)  $(ratio "$hm" "$sm")x slurm"
echo "slurm (sbatch --wrap=true):          $sm jobs/s (median)"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min)"
