#!/usr/bin/env python3
"""A tiny Trainyard training job: linear regression by SGD on synthetic data.

Standard library only. It shows what a job does on Trainyard:

* reads run parameters from TRAINYARD_PARAM_LR and TRAINYARD_PARAM_BATCH_SIZE;
* reports progress as `trainyard: {"step": N, "loss": X}` lines on stdout;
* writes a checkpoint every --checkpoint-every steps into
  $TRAINYARD_CHECKPOINT_DIR as ckpt-N.json, atomically, then marks it
  complete with ckpt-N.json.complete (keeping the last 3), and resumes from
  $TRAINYARD_RESUME_FROM when it is set;
* writes the final model to $TRAINYARD_OUTPUT_DIR/model.json (./model.json
  without it);
* on SIGTERM writes a checkpoint and exits 143.
"""

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import time

KEEP_CHECKPOINTS = 3
MARKER = ".complete"  # ckpt-N.json is complete once ckpt-N.json.complete is beside it
TRUE_W, TRUE_B = 3.0, -1.5  # the line the data is drawn from
SEED = 42


def env_float(name, default):
    value = os.environ.get(name, "")
    if value == "":
        return default
    try:
        return float(value)
    except ValueError:
        sys.exit(f"trainer: {name}={value!r} is not a number")


def env_int(name, default):
    value = os.environ.get(name, "")
    if value == "":
        return default
    try:
        return int(value)
    except ValueError:
        sys.exit(f"trainer: {name}={value!r} is not a whole number")


def make_data(n=256):
    rng = random.Random(SEED)
    xs = [rng.uniform(-1.0, 1.0) for _ in range(n)]
    ys = [TRUE_W * x + TRUE_B + rng.gauss(0.0, 0.1) for x in xs]
    return xs, ys


def mse(w, b, xs, ys):
    return sum((w * x + b - y) ** 2 for x, y in zip(xs, ys)) / len(xs)


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path, obj):
    """Write obj to path so readers never see a partial file."""
    # A fresh temporary name per write: the SIGTERM handler may write while
    # the main loop is in the middle of another write.
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(directory)


def remove(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def save_checkpoint(directory, state):
    """Write ckpt-<step>.json into directory, mark it complete and keep the
    newest few (what the SDK's trainyard.save_checkpoint does, in short)."""
    if not directory:
        return None
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"ckpt-{state['step']:08d}.json")
    write_json_atomic(path, state)
    # The marker, only once the data is in place and durable.
    fd = os.open(path + MARKER, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o666)
    try:
        if os.utime in os.supports_fd:
            os.utime(fd)  # written again: completed now
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(directory)
    ckpts = sorted(
        name for name in os.listdir(directory)
        if name.startswith("ckpt-") and name.endswith(".json")
    )
    for old in ckpts[:-KEEP_CHECKPOINTS]:
        # The marker first: the checkpoint stops being complete before its
        # data goes.
        remove(os.path.join(directory, old + MARKER))
        remove(os.path.join(directory, old))
    return path


def load_checkpoint(path):
    """Load a checkpoint file, or the newest complete one in a directory."""
    if os.path.isdir(path):
        ckpts = sorted(n for n in os.listdir(path) if n.startswith("ckpt-") and n.endswith(".json")
                       and os.path.isfile(os.path.join(path, n + MARKER)))
        if not ckpts:
            sys.exit(f"trainer: no complete checkpoint in {path}")
        path = os.path.join(path, ckpts[-1])
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def progress(step, loss):
    print("trainyard: " + json.dumps({"step": step, "loss": round(loss, 6)}), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="training steps (default 200)")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds to sleep per step (default 0)")
    parser.add_argument("--report-every", type=int, default=10, help="steps between progress lines")
    parser.add_argument("--checkpoint-every", type=int, default=20, help="steps between checkpoints")
    args = parser.parse_args()

    lr = env_float("TRAINYARD_PARAM_LR", 0.1)
    batch_size = max(1, env_int("TRAINYARD_PARAM_BATCH_SIZE", 16))
    ckpt_dir = os.environ.get("TRAINYARD_CHECKPOINT_DIR", "")
    out_dir = os.environ.get("TRAINYARD_OUTPUT_DIR", "")
    resume = os.environ.get("TRAINYARD_RESUME_FROM", "")

    xs, ys = make_data()
    state = {"step": 0, "w": 0.0, "b": 0.0, "lr": lr, "batch_size": batch_size}
    if resume:
        state.update(load_checkpoint(resume))
        print(f"resumed from step {state['step']}", flush=True)

    def on_term(signum, frame):
        path = save_checkpoint(ckpt_dir, dict(state))
        print(f"trainer: SIGTERM at step {state['step']}; checkpoint {path or 'not written (no TRAINYARD_CHECKPOINT_DIR)'}", flush=True)
        sys.exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)

    print(f"trainer: job {os.environ.get('TRAINYARD_JOB_ID', '-')} attempt "
          f"{os.environ.get('TRAINYARD_ATTEMPT', '-')}: {args.steps} steps, lr={lr}, batch_size={batch_size}",
          flush=True)
    while state["step"] < args.steps:
        step = state["step"] + 1
        # The batch depends only on the step, so a resumed run sees the same data.
        rng = random.Random(SEED * 1_000_003 + step)
        idx = [rng.randrange(len(xs)) for _ in range(batch_size)]
        gw = gb = 0.0
        for i in idx:
            err = state["w"] * xs[i] + state["b"] - ys[i]
            gw += 2 * err * xs[i]
            gb += 2 * err
        # Update the state in one assignment so a SIGTERM sees a consistent step.
        state = dict(state, step=step,
                     w=state["w"] - lr * gw / batch_size,
                     b=state["b"] - lr * gb / batch_size)
        if step % args.report_every == 0 or step == args.steps:
            loss = mse(state["w"], state["b"], xs, ys)
            progress(step, loss)
            if step % (args.report_every * 5) == 0 or step == args.steps:
                print(f"step {step}/{args.steps}: loss {loss:.4f}, w={state['w']:.3f}, b={state['b']:.3f}", flush=True)
        if ckpt_dir and step % args.checkpoint_every == 0:
            save_checkpoint(ckpt_dir, state)
        if args.sleep > 0:
            time.sleep(args.sleep)

    model = {"w": state["w"], "b": state["b"], "steps": state["step"],
             "loss": mse(state["w"], state["b"], xs, ys)}
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    model_path = os.path.join(out_dir or ".", "model.json")
    write_json_atomic(model_path, model)
    print(f"trainer: wrote {model_path} (loss {model['loss']:.4f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
