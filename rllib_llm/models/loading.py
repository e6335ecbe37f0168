"""Loading causal LMs and tokenizers, and turning prompts into token ids.

`"embedded"` names the tiny char-level Llama the project trains itself
(`scripts/pretrain_embedded.py`) and ships in `models/embedded/`; `"embedded_tool"` the same
model taught tool-use transcripts, the start of "math_tool" runs (`models/embedded_tool/`);
`"embedded_teacher"` the embedded model after RL (`scripts/train_teacher.py`), a teacher for
on-policy distillation (`models/embedded_teacher/`); `"embedded_reward"` a sequence classifier of
the embedded architecture that tells the embedded model's correct answers from its wrong ones, a
reward model for `reward_model_name_or_path` (`scripts/train_reward_model.py`,
`models/embedded_reward/`).
Any other name goes to Hugging Face's `Auto*.from_pretrained` (a local directory, or a hub id on
a machine that can reach the hub). All go through the same code path, so the embedded
checkpoints exercise exactly what a user's model does.

A name is checked here first (`resolve_checkpoint`), so that a mistake fails at once with what
is wrong instead of going to the hub (tens of seconds of retries, then a traceback about the
internet connection or repo id syntax): a local path that does not exist, a directory without
the files a checkpoint needs, and a hub id that cannot be fetched (HF_HUB_OFFLINE, or the hub
unreachable) and is not in the local cache.

Which names are paths: an existing file or directory; else anything a hub id cannot be (Hugging
Face's own repo id rule: "name" or "org/name" of letters, digits, '-', '_' and '.'): an absolute
path, one starting with ./ ../ or ~, one with two or more '/' or a '\\', one with a space or
another character a repo id forbids; and "dir/name" where dir is an existing local directory.
A well-formed "org/name" is never taken for a path, so "runs/model" with no runs/ here is a hub
id, and it fails at once too when the hub cannot be reached.
"""

from __future__ import annotations

import os
import threading
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

EMBEDDED = "embedded"
EMBEDDED_DIR = Path(__file__).parent / "embedded"
EMBEDDED_TOOL = "embedded_tool"
# "embedded" after RL (the demo's recipe): on-policy distillation's teacher for "embedded".
EMBEDDED_TEACHER = "embedded_teacher"
# A 2-label sequence classifier (incorrect, correct) of the embedded model's answers.
EMBEDDED_REWARD = "embedded_reward"
# Name -> shipped checkpoint directory, each built by a script in scripts/ (see its README).
EMBEDDED_CHECKPOINTS = {EMBEDDED: EMBEDDED_DIR,
                        EMBEDDED_TOOL: Path(__file__).parent / "embedded_tool",
                        EMBEDDED_TEACHER: Path(__file__).parent / "embedded_teacher",
                        EMBEDDED_REWARD: Path(__file__).parent / "embedded_reward"}

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



def resolve_path(name_or_path: str) -> str:
    """Map an `EMBEDDED_CHECKPOINTS` name to its shipped directory; return any other name
    unchanged."""
    shipped = EMBEDDED_CHECKPOINTS.get(name_or_path)
    return str(shipped) if shipped is not None else name_or_path


def resolve_checkpoint(name_or_path: str, *, kind: str, setting: str | None = None) -> str:
    """What to pass to `from_pretrained` for `name_or_path`, checked for a `kind` checkpoint.

    Args:
        name_or_path: "embedded", "embedded_tool", a local directory, or a hub id ("org/name").
        kind: "model" (needs `MODEL_CONFIG` and one of `MODEL_WEIGHTS`) or "tokenizer" (needs one
            of `TOKENIZER_FILES`).
        setting: the setting `name_or_path` came from (e.g. "RLVRConfig.model_name_or_path"),
            named in the errors instead of "model path".

    Returns the local directory (`~` expanded), the hub id unchanged, or, for a hub id in the
    local cache while the hub is unreachable, its cached snapshot directory (so that loading it
    makes no network calls). Raises FileNotFoundError for a path that does not exist and for a
    hub id that cannot be fetched (HF_HUB_OFFLINE, or the hub unreachable) and is not cached,
    ValueError for a file or a directory missing what `kind` needs; all without importing
    transformers, so they come at once (the one network call is a single request to the hub,
    bounded by `HUB_PROBE_TIMEOUT_S`, made once per process).
    """
    if kind not in ("model", "tokenizer"):
        raise ValueError(f"kind={kind!r} is not one of ['model', 'tokenizer']; pick one of them")
    path = os.path.expanduser(resolve_path(name_or_path))
    subject = f"{setting}={name_or_path!r}" if setting else f"{kind} path {name_or_path!r}"
    if os.path.isdir(path):
        _check_checkpoint_files(name_or_path, Path(path), kind)
        return path
    if os.path.exists(path):
        raise ValueError(
            f"{subject} is a file; pass the checkpoint directory that holds "
            f"it (written by save_pretrained), or a hub id"
        )
    if _looks_like_path(name_or_path):
        raise FileNotFoundError(
            f"{subject} does not exist (resolved to "
            f"{os.path.abspath(path)!r}); fix the path (a relative one starts at the working "
            "directory), or pass 'embedded' or a Hugging Face hub id like 'org/name'"
        )
    return _hub_checkpoint(name_or_path, kind, setting)


# The longest the one request that tells whether the hub answers may take (a resolver that
# never answers included).
HUB_PROBE_TIMEOUT_S = 5.0


def _hub_checkpoint(repo_id: str, kind: str, setting: str | None) -> str:
    """`repo_id` if the hub can be asked for it; else its cached snapshot; else FileNotFoundError
    naming the local path it is not and why the hub cannot supply it."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        why = "HF_HUB_OFFLINE is set"
    else:
        unreachable = hub_unreachable(constants.ENDPOINT)
        if unreachable is None:
            return repo_id  # Hugging Face fetches it (or says what is wrong with the id)
        why = f"the hub cannot be reached ({unreachable})"
    cached = _cached_snapshot(repo_id, kind)
    if cached is not None:
        return cached
    subject = f"{setting}={repo_id!r}" if setting else f"{kind} {repo_id!r}"
    raise FileNotFoundError(
        f"{subject} is no local path ({os.path.abspath(os.path.expanduser(repo_id))!r} does "
        f"not exist) and, as a Hugging Face hub id, it is not in the local cache and {why}; "
        "fix the path (a relative one starts at the working directory), pass 'embedded', or "
        "download the model where the hub is reachable"
    )


@lru_cache(maxsize=4)
def hub_unreachable(endpoint: str) -> str | None:
    """Why the hub at `endpoint` does not answer one HEAD request (any HTTP answer is an answer),
    or None when it does. Once per process and endpoint: `hub_unreachable.cache_clear()` asks
    again."""
    from huggingface_hub.utils import get_session

    outcome: list[str | None] = []

    def probe() -> None:
        try:
            get_session().head(endpoint, timeout=HUB_PROBE_TIMEOUT_S)
            outcome.append(None)
        except Exception as e:  # any failure to get an answer is the answer
            outcome.append(f"{type(e).__name__}: {e}".splitlines()[0])

    thread = threading.Thread(target=probe, daemon=True, name="hub-probe")
    thread.start()
    thread.join(HUB_PROBE_TIMEOUT_S + 1.0)  # a resolver lookup is not bounded by the timeout
    return outcome[0] if outcome else f"no answer from {endpoint} in {HUB_PROBE_TIMEOUT_S:g} s"


def _cached_snapshot(repo_id: str, kind: str) -> str | None:
    """The cached snapshot directory of `repo_id`, if it holds a `kind` checkpoint."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        snapshot = snapshot_download(repo_id, local_files_only=True)
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None
    try:
        _check_checkpoint_files(repo_id, Path(snapshot), kind)
    except ValueError:
        return None
    return snapshot


def _looks_like_path(name: str) -> bool:
    """Whether `name` is meant as a local path: it could not be a hub id, or its first part is
    an existing local directory (see the module docstring)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    parent = os.path.dirname(name)
    try:
        validate_repo_id(name)
    except HFValidationError:
        return True  # absolute, ./ ../ ~, two or more '/', a space, '\\', '--', ...
    return name in (".", "..") or (bool(parent) and os.path.isdir(os.path.expanduser(parent)))


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


def load_model(name_or_path: str = EMBEDDED, *, dtype: str = "float32",
               attn_implementation: str | None = None) -> PreTrainedModel:
    """Load a causal LM in eval mode.

    Args:
        name_or_path: `"embedded"`, `"embedded_tool"`, a local checkpoint directory, or a hub id.
        dtype: one of `DTYPES` ("float32", "bfloat16", "float16"); the weights are cast to it.
        attn_implementation: transformers' attention implementation; None = its default.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of {sorted(DTYPES)}; pass e.g. 'float32'")
    shipped = EMBEDDED_CHECKPOINTS.get(name_or_path)
    if shipped is not None and not (shipped / MODEL_CONFIG).exists():
        raise FileNotFoundError(
            f"the {name_or_path} checkpoint is missing from {shipped}; rebuild it with the "
            f"command in {shipped.name}/README.md (a script in scripts/)"
        )
    path = resolve_checkpoint(name_or_path, kind="model")  # fails fast, before the import
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype],
                                                 attn_implementation=attn_implementation)
    return model.eval()


def load_model_and_tokenizer(
    name_or_path: str = EMBEDDED, *, dtype: str = "float32"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """`load_model` and `load_tokenizer` of the same name, as a pair."""
    return load_model(name_or_path, dtype=dtype), load_tokenizer(name_or_path)
