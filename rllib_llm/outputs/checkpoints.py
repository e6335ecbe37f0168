"""A run's checkpoints: find the one a user means, read its config and policy, export the policy.

`rllib-llm export` and `rllib-llm eval` take "a run or a checkpoint": any directory that holds
RLlib Algorithm checkpoints (`Algorithm.save_to_path`), however deep, or one checkpoint itself.
`rllib-llm train` writes a Ray Tune experiment:

    RUN_DIR/                          the experiment (a sweep has one trial directory per trial)
      RLVR_<trial>/                   progress.csv, result.json, params.json
        checkpoint_000002/            an Algorithm checkpoint
          rllib_checkpoint.json       what marks a directory as one (RLlib writes it first)
          rllib_llm_complete.json     written last: what marks it whole (every file, its size)
          algorithm_state.pkl         training_iteration
          class_and_ctor_args.pkl     the run's RLVRConfig
          learner_group/learner/rl_module/default_policy/   the trained RLVRModule

The policy is read from the learner's module (the weights the optimizer last wrote), built as
env runners build it (`inference_only=True`: the causal LM alone, no reference model or critic).
That needs neither Ray running nor the algorithm: loading the embedded run's policy took 5.0 s
on 2 cores, `Algorithm.from_checkpoint` 10.4 s (it starts Ray, and builds an env runner, the
learner with its optimizer, and the reference model and critic when the run had them).

Only whole checkpoints are read (rllib_llm/algorithm/checkpoint_files.py): a directory a killed
save or copy left part-written, or one without `COMPLETE_FILE`, is skipped when a run's latest is
looked for, and refused, in one line naming the newest whole one, when named itself.
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rllib_llm.algorithm.checkpoint_files import (
    COMPLETE_FILE,
    CheckpointError,
    CheckpointWriteError,
    check_whole,
    is_temporary,
    looks_like_checkpoint,
    marked_iteration,
    newest_whole,
    recency,
    temporary_beside,
    torn_reason,
)

if TYPE_CHECKING:
    from rllib_llm.algorithm.config import RLVRConfig
    from rllib_llm.learner.module import RLVRModule

CHECKPOINT_MARKER = "rllib_checkpoint.json"  # RLlib writes it at the top of every checkpoint
CTOR_FILE = "class_and_ctor_args.pkl"
# The policy's RLModule inside an Algorithm checkpoint (RLlib's DEFAULT_MODULE_ID).
POLICY_MODULE = Path("learner_group", "learner", "rl_module", "default_policy")
# FSDP2 learners' shards of the module's weights and Adam's state, in its place
# (torch.distributed.checkpoint; learner/fsdp2_learner.py).
POLICY_SHARDS = Path("learner_group", "learner", "fsdp2_shards")
# Written next to an export: where it came from (the checkpoint, its iteration, the base model).
EXPORT_INFO = "rllib_llm_export.json"

__all__ = [
    "COMPLETE_FILE",
    "CheckpointError",
    "CheckpointWriteError",
    "export_policy",
    "find_checkpoint",
    "is_checkpoint",
    "is_whole_checkpoint",
    "newest_whole_checkpoint",
    "load_policy",
    "load_run_config",
    "training_iteration",
]


def is_checkpoint(path: str | os.PathLike) -> bool:
    """Whether `path` is an RLlib Algorithm checkpoint directory (whole or not)."""
    return (Path(path) / CHECKPOINT_MARKER).is_file()


def is_whole_checkpoint(path: str | os.PathLike) -> bool:
    """Whether `path` is a checkpoint written whole (`COMPLETE_FILE` and every file it lists)."""
    return Path(path).is_dir() and torn_reason(Path(path)) is None


def newest_whole_checkpoint(path: str | os.PathLike) -> Path | None:
    """The newest whole checkpoint at or under `path`, whichever run it belongs to (None if
    there is none)."""
    return newest_whole(_checkpoint_dirs(Path(path)))


def _checkpoint_dirs(root: Path) -> list[Path]:
    """The directories at or under `root` that hold a checkpoint, whole or torn; not those of a
    save in progress."""
    found = {m.parent for name in (CHECKPOINT_MARKER, COMPLETE_FILE) for m in root.rglob(name)}
    if looks_like_checkpoint(root):
        found.add(root)
    return sorted(p for p in found if not is_temporary(p.relative_to(root)))


def find_checkpoint(path: str | os.PathLike, checkpoint: str | os.PathLike | None = None) -> Path:
    """The Algorithm checkpoint that `path` (and `checkpoint`) name.

    Args:
        path: a checkpoint directory, or a directory holding checkpoints at any depth: a run
            directory (Tune's experiment or one trial of it) or where `save_to_path` wrote them.
        checkpoint: a checkpoint or trial directory, absolute or relative to `path`, to pick one
            where `path` holds several runs' checkpoints.

    Returns the checkpoint itself, or the latest whole one of one run's (highest training
    iteration, then the number in its name, as in Tune's checkpoint_000002); torn ones are
    skipped. Raises FileNotFoundError for a path that does not exist, CheckpointError for a
    directory without a whole checkpoint, a torn checkpoint (one line naming the newest whole
    one beside it), one without an RLVR policy, or several trials' checkpoints (listing them).
    """
    root = Path(path).expanduser()
    if checkpoint is not None:
        root = root / Path(checkpoint).expanduser()  # an absolute `checkpoint` replaces root
    _check_directory(root)
    if looks_like_checkpoint(root):
        check_whole(root)
        return _check_policy(root)
    candidates = _checkpoint_dirs(root)
    found = [c for c in candidates if torn_reason(c) is None]
    if candidates and not found:
        raise CheckpointError(
            f"no whole checkpoint under {str(root)!r}: its {len(candidates)} checkpoint "
            f"director{'y is' if len(candidates) == 1 else 'ies are'} torn (e.g. "
            f"{str(candidates[-1].relative_to(root))!r}: {torn_reason(candidates[-1])})")
    if not found:
        holds = sorted(p.name for p in root.iterdir())[:10]
        raise CheckpointError(
            f"no RLlib checkpoint under {str(root)!r}: no directory in it holds "
            f"{CHECKPOINT_MARKER} (it holds {holds or 'nothing'}). A run writes a checkpoint "
            "every checkpoint_frequency iterations and at its end; pass a directory that holds "
            "one, or a checkpoint written by Algorithm.save_to_path."
        )
    runs: dict[Path, list[Path]] = {}
    for ckpt in found:  # a run's checkpoints share their parent (Tune's trial directory)
        runs.setdefault(ckpt.parent, []).append(ckpt)
    latest = {run: max(ckpts, key=recency) for run, ckpts in runs.items()}
    if len(latest) > 1:
        listing = "\n".join(
            f"  {run.relative_to(root)}  (latest: {ckpt.name}, iteration "
            f"{training_iteration(ckpt)})" for run, ckpt in latest.items())
        raise CheckpointError(
            f"{str(root)!r} holds the checkpoints of {len(latest)} runs (trials):\n{listing}\n"
            "pick one: pass its directory, or --checkpoint TRIAL (relative to the run directory)."
        )
    return _check_policy(next(iter(latest.values())))


def _check_directory(path: Path) -> None:
    if not path.exists():
        raise FileNotFoundError(
            f"run or checkpoint directory {str(path)!r} does not exist (resolved to "
            f"{str(path.absolute())!r}); pass the directory `rllib-llm train` wrote, one trial "
            f"directory in it, or a checkpoint directory (one holding {CHECKPOINT_MARKER})."
        )
    if not path.is_dir():
        raise CheckpointError(
            f"{str(path)!r} is a file; pass a run directory or a checkpoint directory (one "
            f"holding {CHECKPOINT_MARKER})."
        )


def _check_policy(checkpoint: Path) -> Path:
    if not ((checkpoint / POLICY_MODULE / CTOR_FILE).is_file()
            or (checkpoint / POLICY_SHARDS).is_dir()):
        raise CheckpointError(
            f"{str(checkpoint)!r} is an RLlib checkpoint without an RLVR policy: it has no "
            f"{POLICY_MODULE.as_posix()}/{CTOR_FILE}. Was it written by another algorithm, or "
            "by RLVR with a module id other than 'default_policy'?"
        )
    return checkpoint


def training_iteration(checkpoint: str | os.PathLike) -> int | None:
    """The iteration an Algorithm checkpoint was written after (None if it does not say)."""
    marked = marked_iteration(Path(checkpoint))
    if marked is not None:
        return marked
    state = _read_pickle(Path(checkpoint) / "algorithm_state.pkl")
    value = state.get("training_iteration") if isinstance(state, dict) else None
    return int(value) if value is not None else None


def _read_pickle(path: Path) -> Any:
    if not path.is_file():
        return None
    with open(path, "rb") as f:
        return pickle.load(f)  # RLlib's own checkpoint format: trusted like the run itself


def load_run_config(checkpoint: str | os.PathLike) -> RLVRConfig:
    """The RLVRConfig the checkpoint's run trained with (as RLlib stores it in the checkpoint)."""
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    from rllib_llm.algorithm.config import RLVRConfig

    check_whole(checkpoint)
    ctor = _read_pickle(Path(checkpoint) / CTOR_FILE)
    args = ctor["ctor_args_and_kwargs"][0] if ctor else ()
    state = args[0] if args else None
    config = AlgorithmConfig.from_state(state) if isinstance(state, dict) else state
    if not isinstance(config, RLVRConfig):
        raise CheckpointError(
            f"{str(checkpoint)!r} was not written by RLVR: its config is "
            f"{type(config).__name__}, not RLVRConfig."
        )
    return config


def load_policy(checkpoint: str | os.PathLike) -> RLVRModule:
    """The checkpoint's trained policy: an RLVRModule with the causal LM alone, in eval mode.

    Built from the module's constructor arguments with `inference_only=True` (as env runners
    build it: no reference model, no critic), then given the saved weights minus those parts.
    """
    from rllib_llm.learner.module import NON_INFERENCE, RLVRModule

    check_whole(checkpoint)
    if (Path(checkpoint) / POLICY_SHARDS).is_dir():
        return _load_sharded_policy(Path(checkpoint))
    module_dir = Path(checkpoint) / POLICY_MODULE
    ctor = _read_pickle(module_dir / CTOR_FILE)
    if not (isinstance(ctor, dict) and issubclass(ctor["class"], RLVRModule)):
        raise CheckpointError(f"{str(module_dir)!r} does not hold an RLVRModule")
    args, kwargs = ctor["ctor_args_and_kwargs"]
    module = ctor["class"](*args, **{**kwargs, "inference_only": True})
    state = _read_pickle(module_dir / "module_state.pkl")
    if state is None:
        raise CheckpointError(f"{str(module_dir)!r} has no module_state.pkl (the weights)")
    module.set_state({k: v for k, v in state.items()
                      if k.split(".", 1)[0] not in NON_INFERENCE})
    return module.eval()


def _load_sharded_policy(checkpoint: Path) -> RLVRModule:
    """`load_policy` of a checkpoint FSDP2 learners wrote as shards: the module built from the
    run's config as env runners build it, its weights read whole from the shards
    (torch.distributed.checkpoint in this one process, which reshards them)."""
    import gymnasium as gym
    import torch.distributed.checkpoint as dcp

    from rllib_llm.learner.module import RLVRModule

    spec = load_run_config(checkpoint).get_default_rl_module_spec()
    # The module's spaces are the token MDP's, which the causal LM does not read.
    module = RLVRModule(observation_space=gym.spaces.Discrete(2),
                        action_space=gym.spaces.Discrete(2), model_config=spec.model_config,
                        inference_only=True)
    shards = str(checkpoint / POLICY_SHARDS)
    # LoRA: the shards hold the adapters and the frozen base under peft's names; read the
    # adapters, which set_state merges into the base (model_name_or_path's, as frozen).
    weights = _saved_adapters(shards) if module.lora else module.state_dict()
    dcp.load({"model": weights}, checkpoint_id=shards, no_dist=True)
    module.set_state(weights)
    return module.eval()


def _saved_adapters(shards: str) -> dict[str, Any]:
    """Empty tensors, keyed as the module's state, of the LoRA adapters the shards hold."""
    import torch
    from torch.distributed.checkpoint import FileSystemReader

    saved = FileSystemReader(shards).read_metadata().state_dict_metadata
    return {key.split(".", 1)[1]: torch.empty(meta.size, dtype=meta.properties.dtype)
            for key, meta in saved.items() if key.startswith("model.") and ".lora_" in key}


def export_policy(checkpoint: str | os.PathLike, out: str | os.PathLike, *,
                  force: bool = False) -> list[Path]:
    """Write the checkpoint's policy to `out` as a Hugging Face model directory.

    `out` gets the causal LM (`save_pretrained`: config.json and safetensors weights in the
    policy's dtype), the run's tokenizer (`model_name_or_path`'s, with the pad token the run
    padded with), a generation_config.json and `EXPORT_INFO` (where it came from).
    `AutoModelForCausalLM.from_pretrained(out)` and `AutoTokenizer.from_pretrained(out)` load it.

    Raises FileExistsError if `out` exists and is not empty, unless `force` (then files of the
    same names are overwritten, one rename each, and weight files of an earlier export that this
    one does not write are deleted, as save_pretrained does; other files stay). Written whole or
    not at all: into a directory beside `out`, `EXPORT_INFO` last, then renamed to `out` (or,
    with `force`, moved in file by file); a full disk raises CheckpointWriteError naming `out`
    and leaves nothing. Returns the files written.
    """
    from rllib_llm.models import load_tokenizer

    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"export directory {str(out)!r} is a file; pass a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise FileExistsError(
            f"export directory {str(out)!r} exists and is not empty; pick a new directory, or "
            "pass --force (force=True) to write into it anyway"
        )
    checkpoint = Path(checkpoint)
    module, config = load_policy(checkpoint), load_run_config(checkpoint)
    settings = module.settings  # learner/module_settings.py
    tokenizer = load_tokenizer(settings.model_name_or_path)
    model = module.model
    model.generation_config = _generation_config(model, tokenizer, config)
    info = {"checkpoint": str(checkpoint.resolve()),
            "training_iteration": training_iteration(checkpoint),
            "base_model": settings.model_name_or_path,
            "model_dtype": settings.model_dtype}
    with temporary_beside(out) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n")
        written = sorted(p.relative_to(tmp) for p in tmp.rglob("*") if p.is_file())
        if out.is_dir() and any(out.iterdir()):
            _move_files(tmp, out, written)
        else:
            os.replace(tmp, out)  # onto nothing or an empty directory: one rename
    return [out / name for name in written]


# The weight files save_pretrained writes (and deletes, from an earlier save, when it writes
# others): model.safetensors, model-00001-of-00002.safetensors, model.safetensors.index.json.
_WEIGHT_FILE = re.compile(r"^(model|pytorch_model)(-\d+-of-\d+)?\.(safetensors|bin)"
                          r"(\.index\.json)?$")


def _move_files(tmp: Path, out: Path, written: list[Path]) -> None:
    """Move the export's files into the non-empty `out`, `EXPORT_INFO` last; delete the weight
    files there that it does not replace."""
    for stale in out.iterdir():
        if stale.is_file() and _WEIGHT_FILE.match(stale.name) and \
                Path(stale.name) not in written:
            stale.unlink()
    for name in sorted(written, key=lambda n: n.name == EXPORT_INFO):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp / name, out / name)


def _generation_config(model, tokenizer, config: RLVRConfig):
    """What `generate()` (and vLLM, which reads generation_config.json) should default to: the
    run's sampler.

    The base model's generation config, then: EOS and pad as the run's sampler used them (EOS
    ends a response; the tokenizer's pad, which `load_tokenizer` sets to EOS when it has none),
    and the distribution the policy was trained on, which its pass@1 measures: sampling at the
    run's temperature and top_p, no top-k (transformers would apply top_k=50 unless told), at
    most response_length new tokens. Not carried over: the env's stop sequences (multi-turn tool
    calls stop on them) and evaluation-only overrides such as greedy decoding.
    """
    gen = copy.deepcopy(model.generation_config)
    gen.eos_token_id = tokenizer.eos_token_id
    gen.pad_token_id = tokenizer.pad_token_id
    gen.do_sample = True
    gen.temperature = float(config.temperature)
    gen.top_p = float(config.top_p)
    gen.top_k = 0
    gen.max_new_tokens = int(config.response_length)
    # Not derived from the model config (transformers 4's generate() replaced a config marked so
    # by the model config's generation values).
    gen._from_model_config = False
    gen.validate()
    return gen
