"""`rllib-llm --help`'s list of settings, generated from the tables that declare them (fields.py,
run_settings.py), the same ones docs/SETTINGS.md's tables come from: nothing here is written
twice."""

from __future__ import annotations

import textwrap

from rllib_llm.algorithm.fields import Field, fields_by_section
from rllib_llm.cli.run_settings import RUN_FIELDS

WIDTH = 96


def _entry(f: Field) -> str:
    doc = textwrap.fill(f.doc, WIDTH, initial_indent="      ", subsequent_indent="      ",
                        break_on_hyphens=False, break_long_words=False)
    return f"  {f.name} (default {f.default!r})\n{doc}"


def settings_help() -> str:
    """Every setting a config file takes in `training:` (RLVRConfig's fields) and `run:`."""
    return "\n".join([
        "Config files: YAML with RLlib's builder sections (environment, training, env_runners, "
        "learners,",
        "evaluation, resources, fault_tolerance, reporting, debugging: the arguments of "
        "RLVRConfig's methods",
        "of those names) and `run:`; or a ROLL RLVR config. `--set section.key=value` "
        "overrides a value.",
        "",
        "training: (RLVRConfig's fields, rllib_llm/algorithm/fields.py; RLlib's lr, "
        "grad_clip, ... too)",
        *(line for title, fields in fields_by_section().items()
          for line in ("", f" {title}:", *(_entry(f) for f in fields))),
        "",
        "run: (how `rllib-llm train` and `sweep` run it, rllib_llm/cli/run_settings.py)",
        *(_entry(f) for f in RUN_FIELDS),
    ])
