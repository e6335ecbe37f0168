"""RLVRConfig's settings are visible to people's tools: typing.get_type_hints, help() and the
stub IDEs and mypy read all name every setting with its type, and builder methods take settings
by their section."""

from __future__ import annotations

import ast
import pydoc
import types
import typing

import pytest

from rllib_llm.algorithm import config_types
from rllib_llm.algorithm.config import ENV_RUNNER_SECTIONS, RLVRConfig
from rllib_llm.algorithm.fields import FIELDS

HINTS = typing.get_type_hints(RLVRConfig)


def test_type_hints_name_every_setting_with_a_type_its_default_has():
    for f in FIELDS:
        hint = HINTS[f.name]
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        members = typing.get_args(hint) if union else (hint,)
        accepted = tuple(typing.get_origin(t) or t for t in members if t is not typing.Any)
        if float in accepted:
            accepted += (int,)  # PEP 484's numeric tower: an int is a float
        if typing.Any not in members:
            assert isinstance(f.default, accepted), (f.name, hint, f.default)


def test_help_shows_every_setting():
    text = pydoc.render_doc(RLVRConfig, renderer=pydoc.plaintext)
    missing = [f.name for f in FIELDS if f"{f.name}: " not in text]
    assert missing == []


def test_the_stub_is_generated_from_the_fields_and_up_to_date():
    """Regenerate with `python -m rllib_llm.algorithm.config_types`."""
    assert config_types.STUB_PATH.read_text() == config_types.render_stub(ENV_RUNNER_SECTIONS)
    stub = ast.parse(config_types.STUB_PATH.read_text())
    (cls,) = [node for node in stub.body if isinstance(node, ast.ClassDef)]
    attributes = [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)]
    assert attributes[:len(FIELDS)] == [f.name for f in FIELDS]
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    assert [a.arg for a in methods["training"].args.kwonlyargs] == [f.name for f in FIELDS]
    assert {a.arg for a in methods["env_runners"].args.kwonlyargs} == {
        f.name for f in FIELDS if f.section in ENV_RUNNER_SECTIONS}


def test_env_runners_takes_the_engine_sections_settings_and_no_others():
    engine = {f.name: f.default for f in FIELDS if f.section in ENV_RUNNER_SECTIONS}
    assert {"rollout_engine", "vllm_max_num_seqs", "weight_sync_backend",
            "max_tokens_per_generate_batch"} <= set(engine)
    config = RLVRConfig().env_runners(**{**engine, "vllm_max_num_seqs": 7})
    assert config.vllm_max_num_seqs == 7
    with pytest.raises(TypeError):  # a training setting is not an env runner's
        RLVRConfig().env_runners(pg_variant="topr")
