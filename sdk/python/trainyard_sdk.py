"""Compatibility module: the in-job helpers now live in the trainyard
package (trainyard.job). Scripts that `import trainyard_sdk` keep working,
whether the SDK is pip-installed or its directory is on PYTHONPATH."""

from trainyard.job import *  # noqa: F401,F403
from trainyard.job import (__all__, Reporter, report, flush, checkpoint_dir, resume_from,  # noqa: F401
                           save_checkpoint, checkpoint_done)
