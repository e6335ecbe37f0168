"""Loading causal LMs and tokenizers, and turning prompts into token ids.

`"embedded"` names the tiny char-level Llama the project trains itself
(`scripts/pretrain_embedded.py`) and ships in `models/embedded/`; `"embedded_tool"` the same
model taught tool-use transcripts, the start of "math_tool" runs (`models/embedded_tool/`).
Any other name goes to Hugging Face's `Auto*.from_pretrained` (a local directory, or a hub id on
a machine that can reach the hub). All go through the same code path, so the embedded
checkpoints exercise exactly what a user's model does.

A name that is a local path is checked here first (`resolve_checkpoint`): a path that does not
exist, or a directory without the files a checkpoint needs, fails at once with what is wrong,
instead of being sent to the hub as a repo id (tens of seconds of retries, then a message about
repo id syntax).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

EMBEDDED = "embedded"
EMBEDDED_DIR = Path(__file__).parent / "embedded"
EMBEDDED_TOOL = "embedded_tool"
# Name -> shipped checkpoint directory, each built by scripts/pretrain_embedded.py (see its
# README).
EMBEDDED_CHECKPOINTS = {EMBEDDED: EMBEDDED_DIR,
                        EMBEDDED_TOOL: Path(__file__).parent / "embedded_tool"}

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# What `from_pretrained` needs in a local directory: a model, its config and weights (one of the
# names: a single file or a shard index); a tokenizer, any one of its files.
MODEL_CONFIG = "config.json"
MODEL_WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "spiece.model",
)

__all__ = [
    "DTYPES",
    "EMBEDDED",
    "EMBEDDED_CHECKPOINTS",
    "EMBEDDED_DIR",
    "EMBEDDED_TOOL",
    "encode_prompt",
    "load_model",
    "load_model_and_tokenizer",
    "load_tokenizer",
    "resolve_checkpoint",
    "resolve_path",
]


def resolve_path(name_or_path: str) -> str:
    """Map an `EMBEDDED_CHECKPOINTS` name to its shipped directory; return any other name
    unchanged."""
    shipped = EMBEDDED_CHECKPOINTS.get(name_or_path)
    return str(shipped) if shipped is not None else name_or_path


def resolve_checkpoint(name_or_path: str, *, kind: str) -> str:
    """What to pass to `from_pretrained` for `name_or_path`, checked for a `kind` checkpoint.

    Args:
        name_or_path: "embedded", "embedded_tool", a local directory, or a hub id ("org/name").
        kind: "model" (needs `MODEL_CONFIG` and one of `MODEL_WEIGHTS`) or "tokenizer" (needs one
            of `TOKENIZER_FILES`).

    Returns the local directory (`~` expanded) or the hub id unchanged. Raises FileNotFoundError
    for a path that does not exist, ValueError for a file or a directory missing what `kind`
    needs; both without touching the hub or importing transformers, so they come at once.
    """
    if kind not in ("model", "tokenizer"):
        raise ValueError(f"kind={kind!r} is not one of ['model', 'tokenizer']; pick one of them")
    path = os.path.expanduser(resolve_path(name_or_path))
    if os.path.isdir(path):
        _check_checkpoint_files(name_or_path, Path(path), kind)
        return path
    if os.path.exists(path):
        raise ValueError(
            f"{kind} path {name_or_path!r} is a file; pass the checkpoint directory that holds "
            f"it (written by save_pretrained), or a hub id"
        )
    if _looks_like_path(name_or_path):
        raise FileNotFoundError(
            f"{kind} path {name_or_path!r} does not exist (resolved to "
            f"{os.path.abspath(path)!r}); fix the path (a relative one starts at the working "
            "directory), or pass 'embedded' or a Hugging Face hub id like 'org/name'"
        )
    return name_or_path  # a hub id


def _looks_like_path(name: str) -> bool:
    """Whether `name` is meant as a local path, not a hub id ("org/name" has one slash)."""
    parent = os.path.dirname(name)
    return (
        os.path.isabs(name)
        or name.startswith(("./", "../", "~"))
        or name in (".", "..")
        or name.count("/") > 1
        or (bool(parent) and os.path.isdir(os.path.expanduser(parent)))
    )


def _check_checkpoint_files(name: str, path: Path, kind: str) -> None:
    present = {p.name for p in path.iterdir()}
    missing = []
    if kind == "model":
        if MODEL_CONFIG not in present:
            missing.append(MODEL_CONFIG)
        if not present & set(MODEL_WEIGHTS):
            missing.append(f"weights (one of {list(MODEL_WEIGHTS)})")
    elif not present & set(TOKENIZER_FILES):
        missing.append(f"tokenizer file (one of {list(TOKENIZER_FILES)})")
    if missing:
        holds = f"it holds {sorted(present)[:10]}" if present else "it is empty"
        raise ValueError(
            f"{kind} directory {name!r} is not a {kind} checkpoint: it has no "
            f"{' and no '.join(missing)} ({holds}); point at a directory written by "
            "save_pretrained, e.g. one from `python -m rllib_llm.models.gguf_checkpoint --out DIR`"
        )


def load_tokenizer(name_or_path: str = EMBEDDED) -> PreTrainedTokenizerBase:
    """Load a tokenizer; guarantee it has a pad token (eos doubles as pad when it has none).

    Generation pads prompt batches, so a pad id must exist; reusing eos is the usual choice for
    decoder-only models and is harmless because padded positions are masked out.
    """
    path = resolve_checkpoint(name_or_path, kind="tokenizer")  # fails fast, before the import
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(
                f"tokenizer {name_or_path!r} has neither pad_token nor eos_token; generation needs "
                "one of them to pad prompts and stop responses"
            )
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def encode_prompt(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Turn a prompt into the token ids the policy sees: the ONE place this happens.

    SFT pretraining and the RL environments both call this, so what the model was taught on and
    what it is rewarded on agree token for token. With a chat template, `text` becomes a single
    user message followed by the assistant's generation prompt; without one it is encoded as is
    (plus whatever special tokens the tokenizer adds itself, e.g. a BOS).
    """
    if tokenizer.chat_template:
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
        # The rendered template already contains BOS and friends: adding them again would double.
        return list(tokenizer(rendered, add_special_tokens=False)["input_ids"])
    return list(tokenizer(text)["input_ids"])


def load_model(name_or_path: str = EMBEDDED, *, dtype: str = "float32") -> PreTrainedModel:
    """Load a causal LM in eval mode.

    Args:
        name_or_path: `"embedded"`, `"embedded_tool"`, a local checkpoint directory, or a hub id.
        dtype: one of `DTYPES` ("float32", "bfloat16", "float16"); the weights are cast to it.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of {sorted(DTYPES)}; pass e.g. 'float32'")
    shipped = EMBEDDED_CHECKPOINTS.get(name_or_path)
    if shipped is not None and not (shipped / MODEL_CONFIG).exists():
        raise FileNotFoundError(
            f"the {name_or_path} checkpoint is missing from {shipped}; rebuild it with the "
            f"command in {shipped.name}/README.md (`python scripts/pretrain_embedded.py ...`)"
        )
    path = resolve_checkpoint(name_or_path, kind="model")  # fails fast, before the import
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype])
    return model.eval()


def load_model_and_tokenizer(
    name_or_path: str = EMBEDDED, *, dtype: str = "float32"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """`load_model` and `load_tokenizer` of the same name, as a pair."""
    return load_model(name_or_path, dtype=dtype), load_tokenizer(name_or_path)
