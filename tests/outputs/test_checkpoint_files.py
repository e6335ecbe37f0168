"""Checkpoints written whole or not at all (rllib_llm/algorithm/checkpoint_files.py): the marker
written last, the swap into place, a full disk, and torn or foreign directories refused in one
line that names the newest whole checkpoint. No Ray here: directories are filled by hand; the
algorithm's own saves, killed part-way, are tests/algorithm/test_whole_checkpoints.py."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rllib_llm.algorithm.checkpoint_files import (
    COMPLETE_FILE,
    CheckpointError,
    CheckpointWriteError,
    check_whole,
    save_in_trial,
    torn_reason,
    write_complete_file,
    write_whole,
)
from rllib_llm.cli import main
from rllib_llm.outputs.checkpoints import (
    POLICY_MODULE,
    find_checkpoint,
    newest_whole_checkpoint,
)

POLICY = POLICY_MODULE / "class_and_ctor_args.pkl"  # the file `fill` writes last


def fill(directory: Path, iteration: int, size: int = 100) -> None:
    """What a checkpoint's writer puts in it: RLlib's files, the last one `size` bytes."""
    (directory / "rllib_checkpoint.json").write_text("{}")
    (directory / POLICY_MODULE).mkdir(parents=True)
    (directory / POLICY).write_bytes(bytes([iteration]) * size)


def temporaries(parent: Path) -> list[str]:
    return [p.name for p in parent.iterdir() if ".partial-" in p.name]


def test_a_checkpoint_is_written_beside_then_moved_into_place_with_its_file_list(tmp_path):
    seen = []
    target = tmp_path / "run" / "checkpoint_000001"
    write_whole(target, lambda tmp: (seen.append(tmp), fill(tmp, 1)), training_iteration=1)
    # Written in a hidden directory beside the target (same filesystem: a rename moves it).
    assert seen[0].parent == target.parent and seen[0].name.startswith(".checkpoint_000001.")
    record = json.loads((target / COMPLETE_FILE).read_text())
    assert record["training_iteration"] == 1
    assert record["files"] == {POLICY.as_posix(): 100, "rllib_checkpoint.json": 2}
    assert torn_reason(target) is None and temporaries(target.parent) == []


def test_a_checkpoint_replaces_the_one_at_its_target_and_nothing_else(tmp_path):
    target = tmp_path / "checkpoint"
    write_whole(target, lambda tmp: fill(tmp, 1), training_iteration=1)
    write_whole(target, lambda tmp: fill(tmp, 2, size=50), training_iteration=2)
    assert (target / POLICY).read_bytes() == bytes([2]) * 50
    assert temporaries(tmp_path) == []
    # An empty directory is a new target; one holding anything but a checkpoint is refused.
    (tmp_path / "empty").mkdir()
    write_whole(tmp_path / "empty", lambda tmp: fill(tmp, 3), training_iteration=3)
    assert torn_reason(tmp_path / "empty") is None
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    with pytest.raises(CheckpointError, match=r"^'.*notes' holds files that are not a checkpoint "
                       r"\(\['todo.txt'\]\); save to a new or empty directory"):
        write_whole(tmp_path / "notes", lambda tmp: fill(tmp, 4))
    assert (tmp_path / "notes" / "todo.txt").read_text() == "mine"
    with pytest.raises(CheckpointError, match=r"^'.*todo.txt' is a file; save a checkpoint to a "
                       "directory$"):
        write_whole(tmp_path / "notes" / "todo.txt", lambda tmp: fill(tmp, 5))


def test_a_failed_write_leaves_nothing_and_the_old_checkpoint_as_it_was(tmp_path):
    target = tmp_path / "checkpoint"
    write_whole(target, lambda tmp: fill(tmp, 1), training_iteration=1)

    def full_disk(tmp: Path) -> None:
        fill(tmp, 2)
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp / "learner_group" / "x"))

    with pytest.raises(CheckpointWriteError) as e:
        write_whole(target, full_disk, training_iteration=2)
    assert str(e.value) == (
        f"could not write '{target}': No space left on device (writing "
        f"learner_group/x); nothing of it was left, '{target}' is as it was")
    assert e.value.__cause__ is None and e.value.__suppress_context__
    assert temporaries(tmp_path) == [] and torn_reason(target) is None
    assert (target / POLICY).read_bytes() == bytes([1]) * 100


def test_a_full_disk_leaves_no_partial_checkpoint(small_disk):
    disk = small_disk("1m")
    target = disk / "checkpoint"
    write_whole(target, lambda tmp: fill(tmp, 1, size=400_000), training_iteration=1)
    with pytest.raises(CheckpointWriteError, match=rf"^could not write '{target}': "
                       rf"No space left on device; nothing of it was left, '{target}' is as it "
                       "was$"):
        write_whole(target, lambda tmp: fill(tmp, 2, size=800_000), training_iteration=2)
    assert sorted(os.listdir(disk)) == ["checkpoint"]
    assert torn_reason(target) is None
    assert (target / POLICY).read_bytes()[:1] == bytes([1])


def test_a_killed_writers_leftovers_are_removed_by_the_next_write(tmp_path):
    target = tmp_path / "checkpoint"
    dead = subprocess.Popen(["true"])  # a process id no process has any more
    dead.wait()
    leftover = tmp_path / f".checkpoint.partial-{dead.pid}-00ff00ff"
    leftover.mkdir()
    fill(leftover, 7)
    write_complete_file(leftover, 7)  # even a whole one: it may be the checkpoint just replaced
    assert newest_whole_checkpoint(tmp_path) is None  # never read
    write_whole(target, lambda tmp: fill(tmp, 1), training_iteration=1)
    assert temporaries(tmp_path) == []


@pytest.fixture
def run(tmp_path):
    """A trial directory: checkpoint_000001 and _000002 whole, _000003 torn as a killed copy
    leaves it (its marker copied, a file short), _000004 without a marker (a killed save)."""
    trial = tmp_path / "run" / "RLVR_x"
    for i in (1, 2, 3):
        write_whole(trial / f"checkpoint_00000{i}", lambda tmp, i=i: fill(tmp, i),
                    training_iteration=i)
    os.truncate(trial / "checkpoint_000003" / POLICY, 10)
    (trial / "checkpoint_000004").mkdir()
    fill(trial / "checkpoint_000004", 4)
    return tmp_path / "run"


def test_torn_and_foreign_directories_are_told_from_whole_ones(run):
    trial = run / "RLVR_x"
    assert torn_reason(trial / "checkpoint_000003") == \
        f"{POLICY.as_posix()} holds 10 of its 100 bytes"
    assert torn_reason(trial / "checkpoint_000004").startswith(
        f"it has no {COMPLETE_FILE}, which rllib_llm writes last")
    shutil.copytree(trial / "checkpoint_000002", run / "missing")
    (run / "missing" / "rllib_checkpoint.json").unlink()
    assert torn_reason(run / "missing") == "rllib_checkpoint.json is missing"
    (run / "missing" / COMPLETE_FILE).write_text('{"files": {"a": ')
    assert torn_reason(run / "missing") == f"its {COMPLETE_FILE} is unreadable"
    (run / "missing" / COMPLETE_FILE).write_text('{"training_iteration": 2}')
    assert torn_reason(run / "missing") == f"its {COMPLETE_FILE} lists no files"


def test_the_newest_whole_checkpoint_is_the_one_found(run):
    assert find_checkpoint(run) == run / "RLVR_x" / "checkpoint_000002"
    assert newest_whole_checkpoint(run) == run / "RLVR_x" / "checkpoint_000002"


def test_a_torn_checkpoint_is_refused_in_one_line_naming_the_newest_whole_one(run):
    torn = run / "RLVR_x" / "checkpoint_000003"
    message = (f"'{torn}' is not a whole checkpoint: {POLICY.as_posix()} holds 10 of its "
               f"100 bytes; the newest whole checkpoint beside it is "
               f"'{run / 'RLVR_x' / 'checkpoint_000002'}' (iteration 2)")
    with pytest.raises(CheckpointError) as e:
        check_whole(torn)
    assert str(e.value) == message
    with pytest.raises(CheckpointError) as e:
        find_checkpoint(torn)
    assert str(e.value) == message


def test_a_directory_of_torn_checkpoints_alone_is_refused(run, tmp_path):
    for whole in ("checkpoint_000001", "checkpoint_000002"):
        shutil.rmtree(run / "RLVR_x" / whole)
    with pytest.raises(CheckpointError, match=r"^no whole checkpoint under '.*run': its 2 "
                       r"checkpoint directories are torn \(e.g. 'RLVR_x/checkpoint_000004': it "
                       r"has no rllib_llm_complete.json"):
        find_checkpoint(run)
    with pytest.raises(CheckpointError, match="there is no whole checkpoint beside it$"):
        check_whole(run / "RLVR_x" / "checkpoint_000003")


@pytest.mark.parametrize("command", ["export", "eval"])
def test_the_command_line_refuses_a_torn_checkpoint_in_one_line(run, tmp_path, capsys, command):
    torn = run / "RLVR_x" / "checkpoint_000003"
    argv = [command, str(torn)] + ([str(tmp_path / "out")] if command == "export" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"rllib-llm {command}: error: '{torn}' is not a whole checkpoint: ")
    assert err.rstrip().endswith(f"'{run / 'RLVR_x' / 'checkpoint_000002'}' (iteration 2)")
    assert not (tmp_path / "out").exists()


class FakeStorage:
    """What `save_in_trial` reads of Tune's StorageContext, and the index Tune advances."""

    def __init__(self, trial: Path, index: int) -> None:
        import pyarrow.fs

        self.trial_fs_path, self.current_checkpoint_index = str(trial), index
        self.storage_filesystem = pyarrow.fs.LocalFileSystem()

    @property
    def checkpoint_fs_path(self) -> str:
        return str(Path(self.trial_fs_path, f"checkpoint_{self.current_checkpoint_index:06d}"))


def test_tunes_copy_of_a_checkpoint_leaves_nothing_part_written(tmp_path):
    trial = tmp_path / "RLVR_x"
    # A killed run's copy of checkpoint_000003, where the resumed run's next copy goes.
    (trial / "checkpoint_000003").mkdir(parents=True)
    (trial / "checkpoint_000003" / "stale.pkl").write_bytes(b"old")
    storage = FakeStorage(trial, index=2)
    local_dirs = []

    def tune_save(checkpoint_dir):  # Trainable.save: the local save, then Tune's copy
        local_dirs.append(checkpoint_dir)
        write_whole(checkpoint_dir, lambda tmp: fill(tmp, 3), training_iteration=3)
        storage.current_checkpoint_index += 1
        assert not Path(storage.checkpoint_fs_path).exists()  # the leftover went first
        shutil.copytree(checkpoint_dir, storage.checkpoint_fs_path)
        return storage.checkpoint_fs_path

    assert save_in_trial(tune_save, storage, None) == str(trial / "checkpoint_000003")
    assert torn_reason(trial / "checkpoint_000003") is None
    assert not Path(local_dirs[0]).exists()  # the local temporary directory is gone

    def full_disk_copy(checkpoint_dir):
        local_dirs.append(checkpoint_dir)
        storage.current_checkpoint_index += 1
        Path(storage.checkpoint_fs_path).mkdir()
        (Path(storage.checkpoint_fs_path) / "rllib_checkpoint.json").write_text("{")
        raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space "
                                    "left on device")

    with pytest.raises(CheckpointWriteError) as e:
        save_in_trial(full_disk_copy, storage, None)
    assert str(e.value) == (f"could not write '{trial / 'checkpoint_000004'}': Error writing "
                            "bytes to file. Detail: [errno 28] No space left on device; nothing "
                            "of it was left")
    assert e.value.errno == errno.ENOSPC
    assert sorted(p.name for p in trial.iterdir()) == ["checkpoint_000003"]
    assert not Path(local_dirs[1]).exists()
