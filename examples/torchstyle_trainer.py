#!/usr/bin/env python3
"""A stand-in for a PyTorch trainer that saves with torch.save (standard
library only), to show and test what happens when such a save is cut short.

torch.save (PyTorch 1.6 and later) writes a zip archive straight onto its
final name, its central directory last. This script does the same with
zipfile: every --checkpoint-every steps it writes the entries of
$TRAINYARD_CHECKPOINT_DIR/<--name> one at a time, flushed, --entry-delay
seconds apart (default: $TORCHSTYLE_ENTRY_DELAY, else 0), so a SIGKILL
during a save leaves a file that is no zip archive: not a complete
checkpoint. It prints `saving PATH` before and `saved PATH` after each save.

It reports progress as `trainyard: {"step": N, "loss": X}` lines. With
$TRAINYARD_RESUME_FROM set it first loads that archive with zipfile and
prints `resumed from step N`; if it cannot be loaded it prints
`torchstyle_trainer: cannot load checkpoint PATH: WHY` on stderr and exits 2,
before any progress (a checkpoint that fails to load after resume).

Flags: --steps N (default 20), --sleep SECONDS per step (default 0),
--checkpoint-every N (default 5), --name NAME (default checkpoint.pt; {step}
is replaced by the step, e.g. step-{step}.pt), --entries N and --entry-bytes
N (default 4 of 65536), and, on the first attempt only ($TRAINYARD_ATTEMPT 1
or unset): --broken-at STEP saves that step's checkpoint as a whole zip
whose state does not load, --fail-at STEP exits 3 after that step.
"""

import argparse
import json
import os
import sys
import time
import zipfile

STATE = "checkpoint/state.json"  # torch.save's archive holds data.pkl, data/N, version


def save(path, step, entries, entry_bytes, delay, broken=False):
    print(f"saving {path}", flush=True)
    with open(path, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        for i in range(entries):
            z.writestr(f"checkpoint/data/{i}", bytes([i % 256]) * entry_bytes)
            f.flush()
            time.sleep(delay)
        z.writestr(STATE, b"{not json" if broken else json.dumps({"step": step}).encode())
        z.writestr("checkpoint/version", b"3")
    print(f"saved {path}", flush=True)


def load(path):
    try:
        with zipfile.ZipFile(path) as z:
            return int(json.loads(z.read(STATE))["step"])
    except (OSError, zipfile.BadZipFile, KeyError, ValueError, TypeError) as e:
        print(f"torchstyle_trainer: cannot load checkpoint {path}: {e}", file=sys.stderr, flush=True)
        sys.exit(2)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--checkpoint-every", type=int, default=5)
    p.add_argument("--name", default="checkpoint.pt")
    p.add_argument("--entries", type=int, default=4)
    p.add_argument("--entry-bytes", type=int, default=65536)
    p.add_argument("--entry-delay", type=float, default=float(os.environ.get("TORCHSTYLE_ENTRY_DELAY") or 0))
    p.add_argument("--broken-at", type=int, default=0)
    p.add_argument("--fail-at", type=int, default=0)
    args = p.parse_args()
    first = os.environ.get("TRAINYARD_ATTEMPT", "1") in ("", "1")
    ckpt_dir = os.environ.get("TRAINYARD_CHECKPOINT_DIR") or "checkpoints"
    os.makedirs(ckpt_dir, exist_ok=True)

    step = 0
    resume = os.environ.get("TRAINYARD_RESUME_FROM", "")
    if resume:
        step = load(resume)
        print(f"resumed from step {step}", flush=True)
    while step < args.steps:
        step += 1
        print("trainyard: " + json.dumps({"step": step, "loss": round(1.0 / step, 6)}), flush=True)
        if step % args.checkpoint_every == 0:
            save(os.path.join(ckpt_dir, args.name.replace("{step}", str(step))), step, args.entries,
                 args.entry_bytes, args.entry_delay, broken=first and step == args.broken_at)
        if first and step == args.fail_at:
            print(f"torchstyle_trainer: failing at step {step} (--fail-at)", file=sys.stderr, flush=True)
            return 3
        time.sleep(args.sleep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
