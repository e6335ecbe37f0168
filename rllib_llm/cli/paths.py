"""Path arguments of the CLI, made absolute where they are parsed.

A relative path means "from the directory the command was started in" only to that process:
pyarrow's filesystem, which RLlib restores checkpoints through, reads `runs/topr/...` as a URI
with no scheme ("URI has empty scheme"), and a Tune trial runs in its own trial directory. So
every path argument (`argparse` `type=`) and every default path is made absolute before anything
uses it, and the commands see the same directory the user named.
"""

from __future__ import annotations

import os
from pathlib import Path


def absolute_path(value: str) -> Path:
    """`value` (`~` expanded) as an absolute path; `..` is folded, symlinks are kept."""
    return Path(os.path.abspath(os.path.expanduser(value)))


def path_or_name(value: str) -> str:
    """`value` as an absolute path if it names something that exists here, else unchanged: an
    argument that is a local directory or a name (a model such as 'embedded' or a hub id, a
    dataset generator such as 'arithmetic')."""
    path = absolute_path(value)
    return str(path) if path.exists() else value


def new_run_dir_problem(run_dir: Path) -> str | None:
    """Why `run_dir` cannot be a run's directory (`--run-dir`), else None. Said before Ray
    starts: Tune would otherwise fail on it minutes later, in a traceback."""
    return new_dir_problem(run_dir, "a directory (new or empty)")


def new_dir_problem(path: Path, wanted: str) -> str | None:
    """Why a directory cannot be written at `path`, else None: it is a file or not writable, a
    file stands where one of its parents should be, or the nearest existing parent is not
    writable. `wanted` is what to pick instead ("a directory (new or empty)")."""
    if path.exists() and not path.is_dir():
        return f"{path} is a file, not a directory; pick {wanted}"
    if path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        return f"{path} is not writable; pick another directory"
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{path} cannot be created: {parent} is a file, not a directory; pick {wanted}"
    if not path.exists() and not os.access(parent, os.W_OK | os.X_OK):
        return f"{path} cannot be created: {parent} is not writable; pick another directory"
    return None
