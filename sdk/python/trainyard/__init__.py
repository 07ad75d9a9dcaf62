"""Trainyard's Python SDK (standard library only).

Two halves:

- trainyard.Client talks to a Trainyard server from anywhere: submit, list,
  show, wait, logs (and follow_logs), cancel, metrics (trainyard.client).
- report, flush, checkpoint_dir, resume_from, save_checkpoint and
  checkpoint_done are for training scripts running as Trainyard jobs
  (trainyard.job; also importable as the older module trainyard_sdk).
"""

from trainyard.client import APIError, Client, TERMINAL_STATES
from trainyard.job import Reporter, checkpoint_dir, checkpoint_done, flush, report, resume_from, save_checkpoint

__version__ = "0.1.0"

__all__ = ["APIError", "Client", "TERMINAL_STATES", "Reporter", "checkpoint_dir", "checkpoint_done", "flush",
           "report", "resume_from", "save_checkpoint", "__version__"]
