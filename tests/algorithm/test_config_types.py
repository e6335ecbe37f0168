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


# The closed choices issue 51 names: each must reach the stub as a Literal.
CLOSED_CHOICES = {"model_dtype", "attn_implementation", "rollout_engine", "weight_sync_backend",
                  "autocast_dtype", "topr_ratio_level", "learner_strategy", "zero_stage",
                  "reward_model_type"}


def _stub_hints() -> dict[str, typing.Any]:
    """The settings' types as the stub declares them: the stub run as Python (annotations
    postponed, as in a stub) and each of RLVRConfig's evaluated there, so every name in them
    must resolve, as a type checker resolves them."""
    namespace: dict[str, typing.Any] = {}
    exec(compile(config_types.STUB_PATH.read_text(), str(config_types.STUB_PATH), "exec"),
         namespace)
    own = vars(namespace["RLVRConfig"])["__annotations__"]
    return {name: eval(annotation, namespace) for name, annotation in own.items()}


def test_the_stubs_literals_are_the_choices_the_fields_declare():
    """A choice added to a field's rule (fields.py) reaches the stub's Literal when the stub is
    regenerated; never a second list of names."""
    hints = _stub_hints()
    closed = {f.name: config_types.choices(f) for f in FIELDS
              if config_types.choices(f) is not None}
    assert CLOSED_CHOICES <= set(closed)
    for f in FIELDS:
        hint = hints[f.name]
        members = typing.get_args(hint) if typing.get_origin(hint) in (
            typing.Union, types.UnionType) else (hint,)
        literals = [m for m in members if typing.get_origin(m) is typing.Literal]
        if f.name in closed:
            (literal,) = literals
            assert typing.get_args(literal) == closed[f.name], f.name
            assert f.default is None or f.default in closed[f.name], f.name
        else:
            assert literals == [] or f.name in ("pg_variant", "adv_estimator", "loss_agg_mode",
                                                 "norm_mean_type", "norm_std_type"), f.name


def test_registry_settings_take_the_cores_built_in_names_or_a_users():
    from rllib_llm import core

    hints = _stub_hints()
    for name, literal in (("pg_variant", core.PgVariant), ("adv_estimator", core.AdvEstimator)):
        assert hints[name] == literal | str  # users register names of their own
        assert set(typing.get_args(literal)) == set(core.registered_names(name))
    assert hints["lora_target_modules"] == str | list[str]


def test_the_stubs_docstrings_are_whole_sentences():
    stub = ast.parse(config_types.STUB_PATH.read_text())
    (cls,) = [node for node in stub.body if isinstance(node, ast.ClassDef)]
    docs = [n.value.value for n in cls.body
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)]
    assert len(docs) == len(FIELDS)
    cut = [doc for doc in docs if doc.endswith(config_types.ABBREVIATIONS)
           or not doc.rstrip(")'\"").endswith((".", "?", "!"))]
    assert cut == []
