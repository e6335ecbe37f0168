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
  no keyword arguments apply. JSON files must be UTF-8. A `.jsonl` file is read line by line, and
  `read_problems(max_record_bytes=...)` skips a longer line unread (the env bounds it by
  `prompt_length`: `problem_set.py`). Any other existing file (a `.csv`, a
  `.txt`) is refused at once, naming the suffixes that work, and so is a path (absolute, or
  starting with `./`, `../` or `~`) that does not exist: neither is sent to the hub as a name.
  A directory named like a file (`p.jsonl/`) and a FIFO or device are refused as what they are.
- Anything else: a Hugging Face dataset, via `datasets.load_dataset(dataset, split=split,
  **kwargs)` (a hub name, on a machine that can reach the hub, or a local directory of data
  files), or `datasets.load_from_disk` for a directory written by `save_to_disk`.

An error in a record names it by its line (`p.jsonl:3`), or by its place in the list
(`record 3 of p.json`), both counted from 1 as editors count lines.

Answers are turned into strings; a GSM8K-style answer holding a worked solution ("... #### 72")
becomes the text after its last `####` ("72"), which is what the verifier compares against. A
number becomes the decimal a model would write: a JSON 1e-05 becomes "0.00001", not "1e-05".
"""

from __future__ import annotations

import codecs
import itertools
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from rllib_llm.envs.arithmetic import arithmetic_problems
from rllib_llm.envs.gsm_symbolic import GSM_SYMBOLIC, gsm_symbolic_problems
from rllib_llm.envs.word_tasks import COMPARE, WORD_PROBLEMS, compare_problems, word_problems

ARITHMETIC = "arithmetic"
FILE_SUFFIXES = (".jsonl", ".json", ".parquet")
_HASH = "####"

logger = logging.getLogger(__name__)


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
    return read_problems(dataset, split=split, prompt_key=prompt_key, answer_key=answer_key,
                         dataset_kwargs=kwargs).problems


@dataclass(frozen=True)
class Problems:
    """What `read_problems` read.

    Attributes:
        problems: `[{"prompt": str, "answer": str}, ...]`.
        num_skipped: .jsonl lines longer than `max_record_bytes`, dropped unparsed.
    """

    problems: list[dict[str, str]]
    num_skipped: int = 0


def read_problems(
    dataset: str,
    *,
    split: str,
    prompt_key: str,
    answer_key: str,
    dataset_kwargs: Mapping[str, Any],
    max_record_bytes: int | None = None,
) -> Problems:
    """`load_problems`, with a bound on a .jsonl file's lines.

    max_record_bytes: a .jsonl line longer than this is skipped without being held whole,
        decoded or parsed (read in chunks), and counted in `num_skipped`; None reads every line.
        (Other sources arrive whole: their prompts are bounded before tokenizing, not here.)
    """
    kwargs = dict(dataset_kwargs)
    if not isinstance(dataset, str) or not dataset:
        raise ValueError(
            f"dataset={dataset!r} must be a non-empty string; pass 'arithmetic', a .jsonl/.json/"
            ".parquet path or a Hugging Face dataset name"
        )
    generator = _GENERATORS.get(dataset)
    if generator is not None:
        return Problems(generator(split, **kwargs))
    num_skipped = 0
    if dataset.endswith(FILE_SUFFIXES):
        if kwargs:
            raise ValueError(
                f"dataset_kwargs={sorted(kwargs)} do not apply to the local file {dataset!r}; "
                "remove them (a local file is read as it is)"
            )
        records, num_skipped = _read_file(Path(dataset), max_record_bytes)
        source = dataset
    else:
        _check_not_a_local_file(dataset)
        source = f"{dataset} (split={split!r})"
        records = _numbered(_load_hf(dataset, split, kwargs), source)
    if not records and num_skipped:
        raise ValueError(
            f"{source} has no line of at most {max_record_bytes} bytes: all {num_skipped} were "
            "skipped unread (a record that long holds a prompt longer than prompt_length can "
            "take); shorten the records, or raise prompt_length"
        )
    return Problems(_to_problems(records, prompt_key, answer_key, source), num_skipped)


_GENERATORS = {
    ARITHMETIC: arithmetic_problems,
    GSM_SYMBOLIC: gsm_symbolic_problems,
    COMPARE: compare_problems,
    WORD_PROBLEMS: word_problems,
}


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
    if path.exists() and not path.is_dir():
        raise ValueError(_not_regular(dataset))


# One record and where it is, as a message names it: "p.jsonl:3" (a line, from 1, as editors and
# JSON errors count), or "record 3 of <source>" (from 1 too) where there are no lines.
Numbered = list[tuple[str, dict]]
_CHUNK_BYTES = 1 << 20  # how much of an over-long line is held at once while skipping it


def _numbered(records: list, source: str) -> Numbered:
    return [(f"record {i} of {source}", r) for i, r in enumerate(records, start=1)]


def _read_file(path: Path, max_record_bytes: int | None) -> tuple[Numbered, int]:
    """Read a local file into numbered records, and the number of .jsonl lines skipped as
    longer than `max_record_bytes`."""
    if path.is_dir():
        raise ValueError(f"dataset file {str(path)!r} is a directory, not a file; name the "
                         f"{path.suffix} file inside it, or a directory without the suffix "
                         "(a Hugging Face dataset directory)")
    if path.exists() and not path.is_file():
        raise ValueError(_not_regular(str(path)))
    if not path.is_file():
        raise FileNotFoundError(f"dataset file {str(path)!r} does not exist; check the path")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return _numbered(pq.read_table(path).to_pylist(), str(path)), 0
    if path.suffix == ".jsonl":
        return _read_jsonl(path, max_record_bytes)
    records = json.loads(_utf8(path, path.read_bytes(), 0, 1))
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ValueError(
            f"dataset file {str(path)!r} must hold a JSON list of objects, one per problem; "
            'write it as [{"prompt": ..., "answer": ...}, ...] or use .jsonl'
        )
    return _numbered(records, str(path)), 0


def _not_regular(dataset: str) -> str:
    # A FIFO or a device would block or never end (a FIFO's reader waits for a writer).
    return (f"dataset {dataset!r} is not a regular file (a FIFO, a socket or a device); write "
            "the problems to a file and name that")


def _read_jsonl(path: Path, max_record_bytes: int | None) -> tuple[Numbered, int]:
    """Stream a .jsonl file line by line: a line longer than `max_record_bytes` is read past in
    chunks and counted, never held whole (one 100 MB prompt, parsed and tokenized, took 18 GB)."""
    limit = -1 if max_record_bytes is None else max_record_bytes + 1  # +1: to see it is over
    records: Numbered = []
    skipped: list[int] = []
    offset = 0
    with path.open("rb") as f:
        for line_number in itertools.count(1):
            line = f.readline(limit)
            if not line:
                break
            if max_record_bytes is not None and len(line.rstrip(b"\r\n")) > max_record_bytes:
                offset += len(line) + (0 if line.endswith(b"\n") else _skip_line(f))
                skipped.append(line_number)
                continue
            text = _utf8(path, line, offset, line_number)
            offset += len(line)
            if text.strip():
                where = f"{path}:{line_number}"
                records.append((where, _json_record(text, where)))
    if skipped:
        shown = ", ".join(map(str, skipped[:5])) + (", ..." if len(skipped) > 5 else "")
        logger.warning("%s: skipped %d lines longer than %d bytes unread (lines %s): a prompt "
                       "that long cannot fit prompt_length", path, len(skipped),
                       max_record_bytes, shown)
    return records, len(skipped)


def _skip_line(f) -> int:
    """Read past the rest of the current line in chunks; the bytes read."""
    skipped = 0
    while chunk := f.readline(_CHUNK_BYTES):
        skipped += len(chunk)
        if chunk.endswith(b"\n"):
            break
    return skipped


def _utf8(path: Path, data: bytes, offset: int, line: int) -> str:
    """`data` (at byte `offset` of the file, from line `line`) as text; a byte that is not
    UTF-8 is named with its offset and line."""
    # A byte order mark, as editors write, is no part of the text.
    start = len(codecs.BOM_UTF8) if offset == 0 and data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as exc:
        at = start + exc.start
        line += data.count(b"\n", 0, at)
        raise ValueError(
            f"dataset file {str(path)!r} is not UTF-8: byte {offset + at} (line {line}) is "
            f"{data[at : at + 1]!r}; a dataset file must be UTF-8: re-encode it "
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
    records: Numbered, prompt_key: str, answer_key: str, source: str
) -> list[dict[str, str]]:
    if not records:
        raise ValueError(f"{source} has no problems; check the file or the split")
    problems = []
    for where, record in records:
        for key_name, key in (("prompt_key", prompt_key), ("answer_key", answer_key)):
            if key not in record:
                raise ValueError(
                    f"{key_name}={key!r} is not a field of {source} ({where}); its fields are "
                    f"{sorted(record)}: pass {key_name}=<one of them>"
                )
        prompt = record[prompt_key]
        if not isinstance(prompt, str) or not prompt:
            raise ValueError(
                f"{where}: {prompt_key}={prompt!r} must be a non-empty string; "
                "fix or drop that record"
            )
        answer = _answer_text(record[answer_key], where, answer_key)
        problems.append({"prompt": prompt, "answer": answer})
    _warn_duplicates(problems, source)
    return problems


def _warn_duplicates(problems: list[dict[str, str]], source: str) -> None:
    """Warn once if prompts repeat: a repeated prompt is sampled more often than the others (a
    weight nobody chose), and a held-out split that repeats scores fewer problems than it says.
    Legal, so a warning, with the count and the first repeat."""
    first_seen: dict[str, int] = {}
    repeats = 0
    example = None
    for i, problem in enumerate(problems):
        seen = first_seen.setdefault(problem["prompt"], i)
        if seen != i:
            repeats += 1
            example = example or (i + 1, seen + 1)
    if repeats:
        logger.warning(
            "%s: %d of its %d problems repeat an earlier prompt (%d distinct; e.g. problem %d "
            "repeats problem %d): they are sampled more often than the others; drop the repeats "
            "if that is not meant", source, repeats, len(problems), len(first_seen), *example)


def _answer_text(answer: Any, where: str, answer_key: str) -> str:
    if isinstance(answer, bool) or not isinstance(answer, str | int | float):
        raise ValueError(  # noqa: TRY004 - bad data in a record, not a bad argument
            f"{where}: {answer_key}={answer!r} must be a string or a number; "
            "fix or drop that record"
        )
    if isinstance(answer, float):
        text = _float_text(answer, where, answer_key)
    else:
        text = str(answer)
    if _HASH in text:
        # GSM8K: a worked solution whose final answer follows "####".
        text = text.rsplit(_HASH, 1)[1]
    text = text.strip()
    if not text:
        raise ValueError(
            f"{where}: {answer_key}={answer!r} holds no answer; fix or drop that record"
        )
    return text


def _float_text(answer: float, where: str, answer_key: str) -> str:
    """A float as a decimal a model could write: 1e-05 -> "0.00001", 1e+20 -> "1000...0".

    `str()` would give "1e-05", which math-verify reads as 1*e - 5 (Euler's e), so no answer could
    match it. `repr` is the shortest text that reads back as the same float (0.1, not
    0.1000000000000000055...; 1e23, not int(1e23) = 99999999999999991611392); `Decimal` writes it
    out without an exponent.
    """
    if not math.isfinite(answer):
        raise ValueError(
            f"{where}: {answer_key}={answer!r} must be a finite number; fix or drop that "
            "record"
        )
    text = format(Decimal(repr(answer)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text  # 72.0 -> "72"
