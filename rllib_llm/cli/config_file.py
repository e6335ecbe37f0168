"""Config files of `rllib-llm train` and `sweep`: YAML in RLlib's builder sections, or ROLL's.

An rllib_llm file groups RLVRConfig settings by the builder method that takes them, as in Python
(`RLVRConfig().environment(...).training(...)`), plus the run's own `run:` section:

    environment: {env: math_verify, env_config: {dataset: arithmetic}}
    training: {pg_variant: topr, lr: 1.0e-5, rollout_batch_size: 64}   # fields.py, RLlib's lr
    env_runners: {num_env_runners: 1}
    evaluation: {evaluation_interval: 10, evaluation_config: {eval_num_problems: 200}}
    debugging: {seed: 0}
    run: {iterations: 200, checkpoint_every: 10}                        # cli/run_settings.py

A file with none of these sections at its top level is a ROLL RLVR config (`roll_config.py` maps
it and reports what it cannot map). `--set section.key=value` (or `--set field=value` for a
fields.py field or a run setting) overrides a file's value; values are YAML.

Errors name the file, the setting and the rule. Numbers such as `1e-5` read as floats (PyYAML's
YAML 1.1 would read a string), and a key given twice in one mapping is an error naming both lines
(algorithm/yaml_loader.py).
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rllib_llm.algorithm.fields import (
    ALIASES,
    FIELDS_BY_NAME,
    alias_note,
    did_you_mean,
    rule_broken,
)
from rllib_llm.algorithm.yaml_loader import parse_yaml
from rllib_llm.cli.run_settings import (
    RUN_FIELDS_BY_NAME,
    TUNE_FIELDS_BY_NAME,
    run_defaults,
    tune_defaults,
)

# Builder sections, applied in this order (the environment first: later checks read it).
BUILDER_SECTIONS = ("environment", "training", "env_runners", "learners", "evaluation",
                    "resources", "fault_tolerance", "reporting", "debugging")
RUN_SECTION = "run"
TUNE_SECTION = "tune"  # sweeps only: cli/sweep.py
SECTIONS = (*BUILDER_SECTIONS, RUN_SECTION, TUNE_SECTION)

_OWN_TABLES = {RUN_SECTION: RUN_FIELDS_BY_NAME, TUNE_SECTION: TUNE_FIELDS_BY_NAME}

# ROLL's run-management fields that `rllib-llm train` runs (roll_config.py reports them as the
# caller's business: here the CLI is the caller). ROLL's names -> (section, setting).
ROLL_RUN_FIELDS = {
    "max_steps": (RUN_SECTION, "iterations"),
    "save_steps": (RUN_SECTION, "checkpoint_every"),
    "max_ckpt_to_keep": (RUN_SECTION, "keep_checkpoints"),
    "eval_steps": ("evaluation", "evaluation_interval"),
    "seed": ("debugging", "seed"),
}


class ConfigFileError(ValueError):
    """A config file (or a --set) that cannot be run: the message names file, setting and rule."""


@dataclass
class RunFile:
    """A file read and checked: its sections (after --set), and for a ROLL file what was mapped."""

    path: Path
    sections: dict[str, dict[str, Any]]
    roll_report: str | None = None
    notes: list[str] = field(default_factory=list)  # what the loader decided on the user's behalf

    @property
    def run(self) -> dict[str, Any]:
        return {**run_defaults(), **self.sections.get(RUN_SECTION, {})}

    @property
    def tune(self) -> dict[str, Any]:
        return {**tune_defaults(), **self.sections.get(TUNE_SECTION, {})}

    def to_config(self):
        """The RLVRConfig the builder sections describe (validated when the algorithm is built;
        `check()` validates it now)."""
        from rllib_llm.algorithm.config import RLVRConfig

        config = RLVRConfig()
        for name in BUILDER_SECTIONS:
            if self.sections.get(name):
                getattr(config, name)(**copy.deepcopy(self.sections[name]))
        return config

    def check(self) -> None:
        """Every rule: each setting's and the ones that tie settings together (RLVRConfig's
        validate), raised as ConfigFileError naming the file."""
        from ray.util.debug import log_once

        log_once("RLVR_on_new_api_stack")  # RLlib's note that RLVR is on its new API stack
        try:
            self.to_config().validate()
        except ValueError as e:
            raise ConfigFileError(f"{self.path}: {e}") from e

    def check_env(self) -> None:
        """Build the training env once, as RLVR does before its runners start (its dataset read
        and checked), raised as ConfigFileError naming the file: a bad data file fails in
        seconds with its own message, not in a Tune trial a minute later. After `check()`."""
        from rllib_llm.rollout.env_setup import check_env

        try:
            check_env(self.to_config())
        except (ValueError, OSError) as e:
            raise ConfigFileError(f"{self.path}: {e}") from e


def read_run_file(path: str | Path, sets: list[str] = (), *, strict: bool = False,
                  allow_search_spaces: bool = False) -> RunFile:
    """Read an rllib_llm or ROLL YAML file, apply `sets` ("key=value"), check every setting.

    strict: a ROLL field that maps onto nothing is an error instead of a line of the report.
    allow_search_spaces: values may be Tune search spaces ({grid_search: [...]}, ...; sweeps).
    """
    path = Path(path)
    data = read_yaml_file(path)
    if not isinstance(data, dict) or not data:
        raise ConfigFileError(f"{path}: must be a YAML mapping of sections "
                              f"({', '.join(SECTIONS)}) or a ROLL config, got {data!r:.80}")
    ours = [k for k in data if k in SECTIONS]
    if ours and len(ours) < len(data):
        stray = [k for k in data if k not in SECTIONS]
        raise ConfigFileError(
            f"{path}: {_names(stray)} at the top level next to the section(s) {_names(ours)}: "
            f"settings go inside a section ({', '.join(SECTIONS)}); a ROLL config has no "
            f"sections.{did_you_mean(stray[0], SECTIONS)}")
    if ours:
        run_file, later = _read_ours(path, data), list(sets)
    else:  # ROLL's fields given by --set are read with the file's, before its rules and derivations
        roll_sets, later = _roll_sets(sets)
        run_file = _read_roll(path, data, strict, roll_sets)
    set_by: dict[tuple[str, str], str] = {}
    for item in later:
        _apply_set(run_file, item, set_by)
    _check_sections(run_file, allow_search_spaces)
    _canonical_names(run_file)
    return run_file


def read_yaml_file(path: Path) -> Any:
    """The file's YAML, or a ConfigFileError naming what is wrong with it as a file."""
    if path.is_dir():
        raise ConfigFileError(f"{path}: is a directory, not a config file; pass the YAML file")
    if not path.is_file():
        raise ConfigFileError(f"{path}: no such file" if not path.exists() else
                              f"{path}: not a regular file (a FIFO or a device); pass the YAML "
                              "file")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")  # (an editor's byte order mark is no part of the text)
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ConfigFileError(
            f"{path}: not UTF-8: byte {e.start} (line {line}) is {raw[e.start:e.start + 1]!r}; "
            "save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8 in.yaml > out.yaml`)"
        ) from None
    try:
        return parse_yaml(text)
    except yaml.YAMLError as e:
        raise ConfigFileError(f"{path}: not valid YAML: {_one_line(e)}") from e


def _one_line(error: yaml.YAMLError) -> str:
    """A YAML error in one line: PyYAML's syntax errors quote the line and point at the column
    over four lines."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem and error.problem_mark:
        mark = error.problem_mark
        return (f"{error.context + ': ' if error.context else ''}{error.problem} (line "
                f"{mark.line + 1}, column {mark.column + 1})")
    return " ".join(str(error).split())


def _read_ours(path: Path, data: dict[str, Any]) -> RunFile:
    sections = {}
    for name, values in data.items():
        if values is None:
            values = {}
        if not isinstance(values, dict):
            raise ConfigFileError(f"{path}: section {name!r} must be a mapping of "
                                  f"setting: value, got {values!r:.80}")
        sections[name] = dict(values)
    names: dict[str, str] = {}
    for key in sections.get("training", {}):
        name = ALIASES.get(key, key)
        if name in names:
            raise ConfigFileError(
                f"{path}: training.{names[name]} and training.{key} both set {name} "
                f"({alias_note(names[name], key)}); keep one.")
        names[name] = key
    return RunFile(path, sections)


def _roll_sets(sets: list[str]) -> tuple[dict[str, Any], list[str]]:
    """The --set items that name a ROLL field (`field=value` or `training.field=value`), as the
    field -> value overrides of a ROLL file, and the other items."""
    from rllib_llm.algorithm.roll_config import is_roll_field, roll_setting

    overrides: dict[str, Any] = {}
    set_by: dict[str, str] = {}  # setting -> the --set item that gave it
    later = []
    for item in sets:
        key, _, raw = item.partition("=")
        parts = key.split(".")
        if parts[0] == "training":
            parts = parts[1:]
        if len(parts) != 1 or not is_roll_field(parts[0]):
            later.append(item)
            continue
        name = roll_setting(parts[0])
        other = set_by.setdefault(name, item)
        if _set_name(other) != parts[0]:
            raise ConfigFileError(
                f"--set {other} and --set {item} both set {name} "
                f"({alias_note(_set_name(other), parts[0])}); keep one.")
        set_by[name] = item
        overrides[parts[0]] = _set_value(item, raw)
    return overrides, later


def _read_roll(path: Path, data: dict[str, Any], strict: bool,
               overrides: dict[str, Any]) -> RunFile:
    """A ROLL file: its algorithm fields (with `overrides`, ROLL fields given by --set) through
    load_roll_config, its run management here, and for the embedded model (a file that names
    none) the sizes it can take, each said, but for what --set gave."""
    from rllib_llm.algorithm.roll_config import load_roll_config, roll_setting
    from rllib_llm.recipes.embedded import EMBEDDED_ROLL_ENV, EMBEDDED_ROLL_OVERRIDES

    run_fields = {k: data.pop(k) for k in list(data) if k in ROLL_RUN_FIELDS}
    try:
        roll = load_roll_config(data, strict=strict, overrides=overrides)
    except ValueError as e:
        raise ConfigFileError(f"{path}: {e}") from e
    if not roll.mapped:
        raise ConfigFileError(
            f"{path}: neither an rllib_llm file (top-level sections {', '.join(SECTIONS)}) nor "
            f"a ROLL config (none of its fields {_names(list(data))} maps onto a setting)")
    sections: dict[str, dict[str, Any]] = {"training": dict(roll.settings)}
    notes = []
    for key, value in run_fields.items():
        section, name = ROLL_RUN_FIELDS[key]
        sections.setdefault(section, {})[name] = value
        notes.append(f"ROLL {key}: {value!r} -> {section}.{name}")
    if "model_name_or_path" not in roll.settings:
        given = {roll_setting(k): k for k in overrides}
        for name, value in EMBEDDED_ROLL_OVERRIDES.items():
            if name in given:
                notes.append(f"no override for the embedded model: {name}: "
                             f"{roll.settings[name]!r}, given by --set {given[name]}")
                continue
            source = roll.source_of(name)  # the file's name of the setting, or None
            if source is not None:
                was = f"{source}: {roll.settings[name]!r}"
            elif name in roll.defaults:
                was = f"{name}: {roll.settings[name]!r} (ROLL's default)"
            else:
                was = f"{name}: {'(not in the file)'!r}"
            notes.append(f"override for the embedded model: {was} -> "
                         f"{'' if source in (None, name) else name + ': '}{value!r}")
            sections["training"][name] = value
        sections["environment"] = copy.deepcopy(EMBEDDED_ROLL_ENV)
        notes.append(f"environment for the embedded model: {EMBEDDED_ROLL_ENV}")
    return RunFile(path, sections, roll_report=roll.report(), notes=notes)


def _apply_set(run_file: RunFile, item: str, set_by: dict[tuple[str, str], str]) -> None:
    """`section.key[.subkey...]=value`, or `name=value` for a training or run setting. It
    replaces the file's value, under whichever name (an alias or its field) the file gave it;
    two --set of one setting under two names are an error (`set_by`: which item set what)."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise ConfigFileError(f"--set {item!r}: expected key=value, e.g. --set training.lr=1e-5")
    parts = key.split(".")
    if parts[0] not in SECTIONS:
        if len(parts) == 1 and parts[0] in _known_settings("training"):
            parts = ["training", *parts]
        elif len(parts) == 1 and parts[0] in RUN_FIELDS_BY_NAME:
            parts = [RUN_SECTION, *parts]
        else:
            raise ConfigFileError(
                f"--set {key}: the key must start with a section ({', '.join(SECTIONS)}) or be "
                f"a training setting or run setting.{did_you_mean(parts[0], _all_names())}")
    if len(parts) < 2:
        raise ConfigFileError(f"--set {key}: name a setting inside the section, e.g. "
                              f"{key}.<setting>=value")
    value = _set_value(item, raw)
    target = run_file.sections.setdefault(parts[0], {})
    for part in parts[1:-1]:
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise ConfigFileError(f"--set {key}: {part} is not a mapping in {run_file.path}")
    name = parts[-1]
    if parts[0] == "training" and len(parts) == 2 and ALIASES.get(name, name) in FIELDS_BY_NAME:
        setting = ALIASES.get(name, name)
        other = set_by.setdefault((parts[0], setting), item)
        if _set_name(other) != name:
            raise ConfigFileError(
                f"--set {other} and --set {item} both set {setting} "
                f"({alias_note(_set_name(other), name)}); keep one.")
        set_by[(parts[0], setting)] = item
        for given in [k for k in target if k != name and ALIASES.get(k, k) == setting]:
            del target[given]  # the file's value under the other name: --set replaces it
    target[name] = value


def _set_name(item: str) -> str:
    """The setting's name in a --set item ("training.num_epochs=2" -> "num_epochs")."""
    return item.partition("=")[0].rsplit(".", 1)[-1]


def _set_value(item: str, raw: str) -> Any:
    try:
        return parse_yaml(raw)
    except yaml.YAMLError as e:
        raise ConfigFileError(f"--set {item!r}: the value is not valid YAML: {e}") from e


def _canonical_names(run_file: RunFile) -> None:
    """Training settings given under an alias (RLlib's num_epochs, ROLL's max_new_tokens) go
    under their field's name, each said ("num_epochs -> ppo_epochs: 2")."""
    training = run_file.sections.get("training")
    if not training or not any(k in ALIASES for k in training):
        return
    for key, value in training.items():
        if key in ALIASES:
            run_file.notes.append(f"{key} -> {ALIASES[key]}: {value!r}")
    run_file.sections["training"] = {ALIASES.get(k, k): v for k, v in training.items()}


def _check_sections(run_file: RunFile, allow_search_spaces: bool) -> None:
    path = run_file.path
    if TUNE_SECTION in run_file.sections and not allow_search_spaces:
        raise ConfigFileError(f"{path}: a 'tune' section belongs in a sweep file: run it with "
                              "`rllib-llm sweep`")
    for section, values in run_file.sections.items():
        known = _known_settings(section)
        for key, value in values.items():
            if key not in known:
                raise ConfigFileError(f"{path}: {section}.{key} is not a setting of {section}"
                                      f".{did_you_mean(key, known)}")
            for candidate in _candidates(path, section, key, value, allow_search_spaces):
                why = _rule(section, key, candidate)
                if why is not None:
                    raise ConfigFileError(
                        f"{path}: {section}.{key} = {candidate!r} is invalid: it {why}.")


def _known_settings(section: str) -> list[str]:
    """What one section accepts: RLlib's method parameters, plus our fields in `training` (and
    the env runners' engine options, which RLVRConfig.env_runners takes)."""
    if section in (RUN_SECTION, TUNE_SECTION):
        return list(_OWN_TABLES[section])
    from rllib_llm.algorithm.config import RLVRConfig

    params = [p for p in inspect.signature(getattr(RLVRConfig, section)).parameters
              if p not in ("self", "kwargs")]
    base = inspect.signature(getattr(RLVRConfig.__mro__[1], section)).parameters
    params += [p for p in base if p not in ("self", "kwargs") and p not in params]
    if section == "training":
        params += [*FIELDS_BY_NAME, *ALIASES]
    if section == "env_runners":
        params += [f for f in FIELDS_BY_NAME if f.startswith(("vllm_", "weight_sync_"))]
    return params


def _candidates(path: Path, section: str, key: str, value: Any,
                allow_search_spaces: bool) -> list[Any]:
    """The values to check: the value, or a search space's grid / choices (none for a
    distribution: Tune samples it, the trial's config is checked when it is built)."""
    from rllib_llm.cli.search_spaces import SEARCH_SPACE_KINDS, is_search_space, malformed

    if not is_search_space(value):
        return [value]
    if not allow_search_spaces:
        raise ConfigFileError(f"{path}: {section}.{key} is a search space ({value!r:.60}): "
                              "run the file with `rllib-llm sweep`")
    why = malformed(value)
    if why:
        raise ConfigFileError(f"{path}: {section}.{key}: {why}")
    (kind, args), = value.items()
    return list(args) if SEARCH_SPACE_KINDS[kind].discrete else []


def _rule(section: str, key: str, value: Any) -> str | None:
    if section in (RUN_SECTION, TUNE_SECTION):
        rule = _OWN_TABLES[section][key].rule
        return rule(value) if rule else None
    name = ALIASES.get(key, key)
    if name in FIELDS_BY_NAME and section in ("training", "env_runners"):
        return rule_broken(name, value)
    return None  # RLlib's own settings: RLVRConfig.validate() checks them (RunFile.check)


def _all_names() -> list[str]:
    """What a --set key without a section may be: a section, a training setting (ours or
    RLlib's, as `_apply_set` takes them) or a run setting."""
    return [*SECTIONS, *_known_settings("training"), *RUN_FIELDS_BY_NAME]


def _names(keys: list[str]) -> str:
    return ", ".join(repr(k) for k in keys)

