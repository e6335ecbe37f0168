"""Tune's list of a trial's checkpoints, kept to those on disk, so that a resumed run prints no
`FileNotFoundError` traceback.

Tune keeps `keep_checkpoints` checkpoints per trial: registering a new one deletes the oldest
(or worst) of its list. After `rllib-llm train --resume`, that list is the one of the last
experiment-state snapshot, which Tune writes only every few checkpoints: a run killed after a
checkpoint deleted one the snapshot still lists (say `checkpoint_000001`) resumes with it listed.
When the resumed run registers its next checkpoint, Tune deletes that one again, and its
`_delete_fs_path` looks the path up outside its own `try` (ray/train/_internal/storage.py): the
`FileNotFoundError` escaped, Tune logged "Error handling checkpoint" with a traceback and skipped
the rest of the registration (the checkpoint index, the forced experiment-state snapshot), though
the run went on and exited 0.

`ForgetDeletedCheckpoints` drops such entries from the trial's list when a checkpoint arrives:
Tune calls callbacks' `on_checkpoint` just before it registers the checkpoint, so nothing is
left to delete twice. (It reads Tune's private `_CheckpointManager._checkpoint_results`: Tune
offers no public way to forget a checkpoint.)
"""

from __future__ import annotations

import pyarrow.fs
from ray.tune import Callback


class ForgetDeletedCheckpoints(Callback):
    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info) -> None:
        forget_deleted_checkpoints(trial.run_metadata.checkpoint_manager)


def forget_deleted_checkpoints(manager) -> list[str]:
    """Remove from a Tune `_CheckpointManager` the checkpoints no longer on disk; their paths."""
    listed = manager._checkpoint_results
    gone = [r for r in listed if _missing(r.checkpoint)]
    if gone:
        manager._checkpoint_results = [r for r in listed if r not in gone]
    return [r.checkpoint.path for r in gone]


def _missing(checkpoint) -> bool:
    info = checkpoint.filesystem.get_file_info(checkpoint.path)
    return info.type == pyarrow.fs.FileType.NotFound
