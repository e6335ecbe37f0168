"""Load math problems as `[{"prompt": str, "answer": str}, ...]` from a generator or a file.

- `"arithmetic"`: the built-in generator (`arithmetic.arithmetic_problems`; keyword arguments
  `seed`, `max_operand`, `ops`, `test_size`, `prompt_style`: "terse" `12+7=`, or "symbols" /
  "words", a question for a chat model). Its records already use "prompt"/"answer", so
  `prompt_key`/`answer_key` do not apply (nor to the other generators below).
- `"compare"` (largest/smallest of a few numbers; `seed`, `size`, `max_number`, `test_size`) and
  `"word_problems"` (two-step stories; `seed`, `test_size`): generated questions for a small chat
  model (`word_tasks.py`), split by what a problem asks, not how it is written.
- `"gsm_symbolic"`: GSM8K-style word problems shipped with rllib_llm (`gsm_symbolic.py`; keyword
  arguments `test_templates`, `seed`), split by template; "prompt"/"answer" records too.
- A path ending in `.jsonl` (one JSON object per line), `.json` (a list of objects) or `.parquet`:
  a local file is one split, so `split` is ignored (point at another file for another split), and
  no keyword arguments apply. JSON files must be UTF-8. Any other existing file (a `.csv`, a
  `.txt`) is refused at once, naming the suffixes that work, and so is a path (absolute, or
  starting with `./`, `../` or `~`) that does not exist: neither is sent to the hub as a name.
- Anything else: a Hugging Face dataset, via `datasets.load_dataset(dataset, split=split,
  **kwargs)` (a hub name, on a machine that can reach the hub, or a local directory of data
  files), or `datasets.load_from_disk` for a directory written by `save_to_disk`.

Answers are turned into strings; a GSM8K-style answer holding a worked solution ("... #### 72")
becomes the text after its last `####` ("72"), which is what the verifier compares against. A
number becomes the decimal a model would write: a JSON 1e-05 becomes "0.00001", not "1e-05".
"""

from __future__ import annotations

import codecs
import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

from rllib_llm.envs.arithmetic import arithmetic_problems
from rllib_llm.envs.gsm_symbolic import GSM_SYMBOLIC, gsm_symbolic_problems
from rllib_llm.envs.word_tasks import COMPARE, WORD_PROBLEMS, compare_problems, word_problems

ARITHMETIC = "arithmetic"
FILE_SUFFIXES = (".jsonl", ".json", ".parquet")
_HASH = "####"


def load_problems(
    dataset: str = ARITHMETIC,
    *,
    split: str = "train",
    prompt_key: str = "prompt",
    answer_key: str = "answer",
    **kwargs: Any,
) -> list[dict[str, str]]:
    """Return the problems of `dataset` as `[{"prompt": str, "answer": str}, ...]`.

    Args:
        dataset: "arithmetic", "compare", "word_problems", "gsm_symbolic", a local
            .jsonl/.json/.parquet file, or a Hugging Face dataset name or directory (see the
            module docstring).
        split: which split ("train", "test", ...); ignored for local files.
        prompt_key: the field holding the prompt text (e.g. "question" for GSM8K).
        answer_key: the field holding the ground-truth answer.
        **kwargs: passed to the generator or to `datasets.load_dataset`/`load_from_disk`.
    """
    if not isinstance(dataset, str) or not dataset:
        raise ValueError(
            f"dataset={dataset!r} must be a non-empty string; pass 'arithmetic', a .jsonl/.json/"
            ".parquet path or a Hugging Face dataset name"
        )
    if dataset == ARITHMETIC:
        return arithmetic_problems(split, **kwargs)
    if dataset == GSM_SYMBOLIC:
        return gsm_symbolic_problems(split, **kwargs)
    if dataset == COMPARE:
        return compare_problems(split, **kwargs)
    if dataset == WORD_PROBLEMS:
        return word_problems(split, **kwargs)
    if dataset.endswith(FILE_SUFFIXES):
        if kwargs:
            raise ValueError(
                f"dataset_kwargs={sorted(kwargs)} do not apply to the local file {dataset!r}; "
                "remove them (a local file is read as it is)"
            )
        records, source = _read_file(Path(dataset)), dataset
    else:
        _check_not_a_local_file(dataset)
        records, source = _load_hf(dataset, split, kwargs), f"{dataset} (split={split!r})"
    return _to_problems(records, prompt_key, answer_key, source)


def _check_not_a_local_file(dataset: str) -> None:
    """Refuse a local file (not one of `FILE_SUFFIXES`) and a local path that is missing.

    Either would otherwise go to `datasets.load_dataset` as a hub name: a network wait, then a
    message about repo ids.
    """
    path = Path(dataset).expanduser()
    if path.is_file():
        raise ValueError(
            f"dataset file {dataset!r} has the suffix {path.suffix!r}, which is not read here; "
            f"the supported suffixes are {list(FILE_SUFFIXES)}: convert it to .jsonl, or name "
            f"a datasets builder, e.g. dataset='csv', dataset_kwargs={{'data_files': {dataset!r}}}"
        )
    if dataset.startswith(("/", "./", "../", "~")) and not path.exists():
        raise FileNotFoundError(f"dataset path {dataset!r} does not exist; check the path")


def _read_file(path: Path) -> list[dict]:
    """Read a local file into records."""
    if not path.is_file():
        raise FileNotFoundError(f"dataset file {str(path)!r} does not exist; check the path")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    text = _read_utf8(path)
    if path.suffix == ".jsonl":
        records = []
        for line_number, line in enumerate(text.split("\n"), start=1):
            if line.strip():
                records.append(_json_record(line, f"{path}:{line_number}"))
    else:
        records = json.loads(text)
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise ValueError(
                f"dataset file {str(path)!r} must hold a JSON list of objects, one per problem; "
                'write it as [{"prompt": ..., "answer": ...}, ...] or use .jsonl'
            )
    return records


def _read_utf8(path: Path) -> str:
    """The file's text; a byte that is not UTF-8 is named with its offset and line."""
    data = path.read_bytes()
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0  # as editors write
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = start + exc.start
        line = data.count(b"\n", 0, offset) + 1
        raise ValueError(
            f"dataset file {str(path)!r} is not UTF-8: byte {offset} (line {line}) is "
            f"{data[offset : offset + 1]!r}; a dataset file must be UTF-8: re-encode it "
            "(e.g. `iconv -f latin1 -t utf-8 in.jsonl > out.jsonl`)"
        ) from None


def _json_record(line: str, where: str) -> dict:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} is not valid JSON ({exc.msg}); fix or remove the line") from exc
    if not isinstance(record, dict):  # bad data, not a bad argument: ValueError, like the rest
        raise ValueError(  # noqa: TRY004
            f"{where} holds a {type(record).__name__}, not an object; write one object per line"
        )
    return record


def _load_hf(dataset: str, split: str, kwargs: dict) -> list[dict]:
    import datasets

    path = Path(dataset)
    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        loaded = datasets.load_from_disk(str(path), **kwargs)
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise ValueError(
                    f"split={split!r} is not in the dataset saved at {dataset!r}; its splits "
                    f"are {sorted(loaded)}"
                )
            loaded = loaded[split]
    else:
        loaded = datasets.load_dataset(dataset, split=split, **kwargs)
    return loaded.to_list()


def _to_problems(
    records: list[dict], prompt_key: str, answer_key: str, source: str
) -> list[dict[str, str]]:
    if not records:
        raise ValueError(f"{source} has no problems; check the file or the split")
    problems = []
    for i, record in enumerate(records):
        for key_name, key in (("prompt_key", prompt_key), ("answer_key", answer_key)):
            if key not in record:
                raise ValueError(
                    f"{key_name}={key!r} is not a field of {source} (record {i}); its fields are "
                    f"{sorted(record)}: pass {key_name}=<one of them>"
                )
        prompt = record[prompt_key]
        if not isinstance(prompt, str) or not prompt:
            raise ValueError(
                f"record {i} of {source}: {prompt_key}={prompt!r} must be a non-empty string; "
                "fix or drop that record"
            )
        answer = _answer_text(record[answer_key], i, answer_key, source)
        problems.append({"prompt": prompt, "answer": answer})
    return problems


def _answer_text(answer: Any, index: int, answer_key: str, source: str) -> str:
    if isinstance(answer, bool) or not isinstance(answer, str | int | float):
        raise ValueError(  # noqa: TRY004 - bad data in a record, not a bad argument
            f"record {index} of {source}: {answer_key}={answer!r} must be a string or a number; "
            "fix or drop that record"
        )
    if isinstance(answer, float):
        text = _float_text(answer, index, answer_key, source)
    else:
        text = str(answer)
    if _HASH in text:
        # GSM8K: a worked solution whose final answer follows "####".
        text = text.rsplit(_HASH, 1)[1]
    text = text.strip()
    if not text:
        raise ValueError(
            f"record {index} of {source}: {answer_key}={answer!r} holds no answer; fix or drop "
            "that record"
        )
    return text


def _float_text(answer: float, index: int, answer_key: str, source: str) -> str:
    """A float as a decimal a model could write: 1e-05 -> "0.00001", 1e+20 -> "1000...0".

    `str()` would give "1e-05", which math-verify reads as 1*e - 5 (Euler's e), so no answer could
    match it. `repr` is the shortest text that reads back as the same float (0.1, not
    0.1000000000000000055...; 1e23, not int(1e23) = 99999999999999991611392); `Decimal` writes it
    out without an exponent.
    """
    if not math.isfinite(answer):
        raise ValueError(
            f"record {index} of {source}: {answer_key}={answer!r} must be a finite number; fix or "
            "drop that record"
        )
    text = format(Decimal(repr(answer)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text  # 72.0 -> "72"
