"""Checkpoint directories written whole or not at all, and told apart from torn ones.

RLlib writes an Algorithm checkpoint file by file into its target, `rllib_checkpoint.json` first
(ray/rllib/utils/checkpoints.py, `Checkpointable.save_to_path`): a driver killed part-way left a
directory that looked like a checkpoint and held 2-17 of its 18 files, and restoring it died on a
pickle error naming no file. Two things fix that:

- `write_whole(target, write)`: the checkpoint is written into a hidden temporary directory beside
  `target` (same filesystem, so a rename moves it), `COMPLETE_FILE` is written last, and the
  directory is renamed into place; an existing checkpoint at `target` is swapped out atomically
  (Linux `renameat2(RENAME_EXCHANGE)`). A kill leaves the old checkpoint or the new one at
  `target`, never a mix; an error (a full disk) removes the temporary directory.
- `COMPLETE_FILE` lists every other file of the checkpoint with its size. Where a copy is not ours
  to rename (Ray Tune copies a trial's checkpoint from a local temporary directory into the run
  directory, in no set order, ray/train/_internal/storage.py `persist_current_checkpoint`), a
  missing or short file is still seen: `torn_reason` compares the directory with the list.

A directory without `COMPLETE_FILE` is not whole: a save that stopped, or a checkpoint written by
RLlib itself or by rllib_llm before it wrote the file (RLlib's own `rllib_checkpoint.json` is its
first file, not its last, so it proves nothing).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import re
import secrets
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

COMPLETE_FILE = "rllib_llm_complete.json"
RLLIB_METADATA = "rllib_checkpoint.json"  # RLlib's first file of every checkpoint
# Files that show a directory was meant to be a checkpoint, whole or not.
CHECKPOINT_FILES = (COMPLETE_FILE, RLLIB_METADATA, "algorithm_state.pkl",
                    "class_and_ctor_args.pkl")
# `.NAME.partial-PID-RANDOM`: a checkpoint being written for NAME (or, after the swap, the one it
# replaced, about to be removed). Hidden, so a listing of checkpoints skips it.
_TEMP = re.compile(r"^\.(?P<name>.+)\.partial-(?P<pid>\d+)-[0-9a-f]+$")

__all__ = ["COMPLETE_FILE", "CheckpointError", "CheckpointWriteError", "check_whole",
           "checkpoint_root", "copy_failed", "is_temporary", "local_path",
           "looks_like_checkpoint", "marked_iteration", "newest_whole", "next_tune_copy",
           "recency", "save_in_trial", "save_whole", "temporary_beside", "torn_reason",
           "write_complete_file", "write_complete_file_at", "write_whole"]


class CheckpointError(ValueError):
    """A directory that holds no usable checkpoint: none, a torn one, or more than one run's."""


class CheckpointWriteError(OSError):
    """A checkpoint or export that could not be written (a full disk); nothing of it was left.
    Its `errno` is the failed write's."""

    def __str__(self) -> str:  # the message alone: it quotes the OSError's own text
        return self.strerror or super().__str__()


# --- writing ------------------------------------------------------------------------------------
def write_whole(target: str | os.PathLike, write: Callable[[Path], object], *,
                training_iteration: int | None = None) -> Path:
    """Call `write(tmp)` to fill a new directory beside `target`, write `COMPLETE_FILE` in it,
    then move it to `target`.

    `target` may be absent, an empty directory, or a checkpoint (replaced: the old one is gone
    only once the new one is in place). Anything else is refused, as RLlib would mix the two.

    Raises CheckpointError for a target that is not replaceable, CheckpointWriteError (one line,
    with the path) when writing fails with an OSError, such as a full disk; either way the
    temporary directory is removed and `target` is as it was.
    """
    target = Path(target)
    _check_replaceable(target)
    with temporary_beside(target) as tmp:
        write(tmp)
        write_complete_file(tmp, training_iteration)
        _move_into_place(tmp, target)
    return target


def save_whole(save: Callable[[str, object], str], path, *, filesystem=None,
               training_iteration: int | None = None) -> str:
    """`save(path, filesystem)` (RLlib's `save_to_path`) through `write_whole` for a local
    `path`; on another filesystem, where nothing is renamed into place, `COMPLETE_FILE` is still
    written last, its file list telling a torn copy. `path` None: a new directory in the system's
    temporary directory, as RLlib makes. Returns where it saved."""
    if path is None:
        path = Path(tempfile.gettempdir(), uuid.uuid4().hex)
    local = local_path(path, filesystem)
    if local is None:
        import pyarrow.fs

        if filesystem is None:
            filesystem, path = pyarrow.fs.FileSystem.from_uri(os.fspath(path))
        saved = save(path, filesystem)
        write_complete_file_at(filesystem, saved, training_iteration)
        return saved
    write_whole(local, lambda tmp: save(str(tmp.absolute()), None),
                training_iteration=training_iteration)
    return str(local)


def save_in_trial(save: Callable[[str | None], object], storage, checkpoint_dir: str | None):
    """Tune's `Trainable.save` (`save`): `save_checkpoint` into a local temporary directory, then,
    in a Tune trial (`storage`, its StorageContext; None outside Tune), Tune's copy of it into
    the trial directory, file by file (ray/tune/trainable/trainable.py).

    A copy that fails (a full disk) left itself part-written and the temporary directory behind:
    here both are removed, and the error is one CheckpointWriteError line with the path. So is
    what a killed run left where the copy goes (`next_tune_copy`), before it starts: no file of
    it may mix into the new copy and pass for part of it.
    """
    leftover = next_tune_copy(storage) if storage is not None else None
    if leftover is not None and leftover.exists():
        shutil.rmtree(leftover)
    own = checkpoint_dir is None and storage is not None
    if own:  # ours, so that it goes whatever happens (Tune removes its own only on success)
        checkpoint_dir = tempfile.mkdtemp(prefix="rllib_llm_checkpoint_")
    try:
        return save(checkpoint_dir)
    except CheckpointWriteError:
        raise
    except OSError as e:
        if storage is None:
            raise
        raise copy_failed(storage.checkpoint_fs_path, storage.storage_filesystem, e) from None
    finally:
        if own:
            shutil.rmtree(checkpoint_dir, ignore_errors=True)


@contextlib.contextmanager
def temporary_beside(target: Path) -> Iterator[Path]:
    """A new hidden directory beside `target` (same filesystem: a rename moves it there), removed
    on leaving: by then moved into place, or left by an error. An OSError inside (a full disk)
    becomes one CheckpointWriteError line naming `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(target)
    tmp = _temporary_name(target)
    try:
        tmp.mkdir()
        yield tmp
    except Exception as e:
        number = e.errno if isinstance(e, OSError) else _disk_full(e)
        if number is None:
            raise
        message = (f"could not write {str(target)!r}: {_one_line(e)}"
                   + (f" (writing {name})" if (name := _short(getattr(e, "filename", None), tmp))
                      else "")
                   + f"; nothing of it was left, {str(target)!r} is as it was")
        raise CheckpointWriteError(number, message) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _disk_full(error: Exception) -> int | None:
    """ENOSPC or EDQUOT when a writer that raises no OSError says it ran out of space
    (safetensors: "I/O error: No space left on device (os error 28)"), else None."""
    text = str(error)
    for number in (errno.ENOSPC, errno.EDQUOT):
        if os.strerror(number) in text:
            return number
    return None


def _one_line(e: Exception) -> str:
    return " ".join(str(getattr(e, "strerror", None) or e).split())


def _temporary_name(target: Path) -> Path:
    return target.parent / f".{target.name}.partial-{os.getpid()}-{secrets.token_hex(4)}"


def copy_failed(path: str, filesystem, error: OSError) -> CheckpointWriteError:
    """The error of a copy into `path` (on `filesystem`) that failed, once what it wrote there
    is removed: one line naming `path`."""
    local = local_path(path, filesystem)
    if local is not None:
        shutil.rmtree(local, ignore_errors=True)
    message = (f"could not write {path!r}: {_one_line(error)}; "
               + ("nothing of it was left" if local is not None
                  else "what was copied of it is still there"))
    return CheckpointWriteError(error.errno, message)


def next_tune_copy(storage) -> Path | None:
    """The local directory Tune's next checkpoint copy of a trial goes to (None on another
    filesystem), from its StorageContext: the index is the last one plus 1 (ray/train/_internal/
    storage.py `_update_checkpoint_index`). After `--resume` that index is the last registered
    checkpoint's plus 1: the name of the one a killed run may have been copying."""
    name = f"checkpoint_{storage.current_checkpoint_index + 1:06d}"
    return local_path(Path(storage.trial_fs_path, name).as_posix(), storage.storage_filesystem)


def write_complete_file(directory: Path, training_iteration: int | None) -> None:
    """`COMPLETE_FILE` in `directory`: its iteration and every other file with its size."""
    files = {p.relative_to(directory).as_posix(): p.stat().st_size
             for p in sorted(directory.rglob("*")) if p.is_file() and p.name != COMPLETE_FILE}
    # Itself written beside and renamed: a half-written list must not read as a short one.
    part = directory / f".{COMPLETE_FILE}.part"
    part.write_text(_complete_record(training_iteration, files))
    os.replace(part, directory / COMPLETE_FILE)


def write_complete_file_at(filesystem, path: str, training_iteration: int | None) -> None:
    """`write_complete_file` on a pyarrow filesystem (a remote one: nothing there is renamed
    into place, but the list still tells a torn copy from a whole one)."""
    import pyarrow.fs

    infos = filesystem.get_file_info(pyarrow.fs.FileSelector(path, recursive=True))
    root = path.rstrip("/") + "/"
    files = {i.path[len(root):]: i.size for i in sorted(infos, key=lambda i: i.path)
             if i.type == pyarrow.fs.FileType.File and i.path.startswith(root)
             and not i.path.endswith("/" + COMPLETE_FILE)}
    with filesystem.open_output_stream(root + COMPLETE_FILE) as f:
        f.write(_complete_record(training_iteration, files).encode())


def _complete_record(training_iteration: int | None, files: dict[str, int]) -> str:
    """`COMPLETE_FILE`'s text: who wrote it, the iteration, each file (relative) -> its size."""
    record = {"written_by": "rllib_llm", "training_iteration": training_iteration,
              "files": files}
    return json.dumps(record, indent=1) + "\n"


def checkpoint_root(path, component: str | None, filesystem=None) -> Path | None:
    """The local checkpoint directory a restore of `path` (a `component` of it) reads; None for
    another filesystem, or a component's directory that is not inside a checkpoint's."""
    local = local_path(path, filesystem)
    if local is None or not component:
        return local
    parts = Path(component).parts
    if local.parts[-len(parts):] != parts:
        return None
    return local.parents[len(parts) - 1]


def local_path(path, filesystem=None) -> Path | None:
    """`path` as a local directory, or None when it is on another filesystem (a URI, or a
    pyarrow filesystem other than the local one)."""
    if filesystem is not None:
        import pyarrow.fs

        if not isinstance(filesystem, pyarrow.fs.LocalFileSystem):
            return None
    text = os.fspath(path)
    return None if "://" in text else Path(text)


def remove_stale_temporaries(target: Path) -> None:
    """Remove the temporary directories for `target` that a killed writer left behind."""
    if not target.parent.is_dir():
        return
    for entry in target.parent.iterdir():
        m = _TEMP.match(entry.name)
        if m and m.group("name") == target.name and not _alive(int(m.group("pid"))):
            shutil.rmtree(entry, ignore_errors=True)


def _check_replaceable(target: Path) -> None:
    if target.is_file():
        raise CheckpointError(f"{str(target)!r} is a file; save a checkpoint to a directory")
    if target.is_dir() and not looks_like_checkpoint(target):
        held = sorted(p.name for p in target.iterdir())
        if held:
            raise CheckpointError(
                f"{str(target)!r} holds files that are not a checkpoint ({held[:5]}); save to a "
                "new or empty directory, or to a checkpoint's own directory (which is replaced)")


def _move_into_place(tmp: Path, target: Path) -> None:
    """Rename `tmp` to `target`; an existing checkpoint there goes to `tmp` (for its caller to
    remove)."""
    if not target.is_dir() or not any(target.iterdir()):
        os.replace(tmp, target)  # onto nothing or an empty directory: one rename
    elif not _exchange(tmp, target):
        # No atomic swap on this system: two renames; a kill between them leaves the old
        # checkpoint and the new one under temporary names, and `target` absent.
        old = _temporary_name(target)
        os.replace(target, old)
        os.replace(tmp, target)
        os.replace(old, tmp)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid != 0


def _short(filename, tmp: Path) -> str | None:
    """The file an OSError names, relative to the temporary directory (where it was written)."""
    if not filename:
        return None
    with contextlib.suppress(ValueError):
        return Path(os.fsdecode(filename)).relative_to(tmp).as_posix()
    return os.fsdecode(filename)


# --- reading ------------------------------------------------------------------------------------
def is_temporary(path: Path) -> bool:
    """Whether `path` is, or lies in, a checkpoint still being written (or being removed)."""
    return any(_TEMP.match(part) for part in path.parts)


def looks_like_checkpoint(path: Path) -> bool:
    """Whether `path` holds any file of a checkpoint (whole or torn)."""
    return any((path / name).is_file() for name in CHECKPOINT_FILES)


def torn_reason(directory: Path) -> str | None:
    """Why `directory` is not a whole checkpoint, in a few words; None when it is."""
    record = _read_complete_file(directory)
    if isinstance(record, str):
        return record
    for name, size in record["files"].items():
        path = directory / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} holds {path.stat().st_size} of its {size} bytes"
    return None


def marked_iteration(directory: Path) -> int | None:
    """The training iteration `COMPLETE_FILE` records (None without one)."""
    record = _read_complete_file(directory)
    if isinstance(record, str) or record.get("training_iteration") is None:
        return None
    return int(record["training_iteration"])


def _read_complete_file(directory: Path) -> dict | str:
    path = directory / COMPLETE_FILE
    if not path.is_file():
        return (f"it has no {COMPLETE_FILE}, which rllib_llm writes last (a save that stopped "
                "part-way, or a checkpoint not written by this version of rllib_llm)")
    try:
        record = json.loads(path.read_text())
    except (ValueError, OSError):
        return f"its {COMPLETE_FILE} is unreadable"
    if not isinstance(record, dict) or not isinstance(record.get("files"), dict):
        return f"its {COMPLETE_FILE} lists no files"
    return record


def newest_whole(candidates: Iterable[Path]) -> Path | None:
    """The newest whole checkpoint of `candidates`: highest iteration, then the number in its
    name (Tune's checkpoint_000002), then modification time."""
    whole = [c for c in candidates if not is_temporary(c) and torn_reason(c) is None]
    return max(whole, key=recency, default=None)


def recency(checkpoint: Path) -> tuple[int, int, float]:
    """Sort key of a run's whole checkpoints: iteration, the number in the name, mtime."""
    number = re.search(r"(\d+)$", checkpoint.name)
    return (marked_iteration(checkpoint) or 0, int(number.group(1)) if number else -1,
            checkpoint.stat().st_mtime)


def check_whole(directory: str | os.PathLike) -> None:
    """Raise CheckpointError, one line naming `directory` and the newest whole checkpoint beside
    it, unless it is a whole checkpoint."""
    directory = Path(directory)
    reason = torn_reason(directory)
    if reason is None:
        return
    siblings = [p for p in directory.parent.iterdir() if p.is_dir() and p != directory] \
        if directory.parent.is_dir() else []
    best = newest_whole(siblings)
    raise CheckpointError(
        f"{str(directory)!r} is not a whole checkpoint: {reason}; "
        + (f"the newest whole checkpoint beside it is {str(best)!r} (iteration "
           f"{marked_iteration(best)})" if best is not None
           else "there is no whole checkpoint beside it"))
