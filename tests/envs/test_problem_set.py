"""Prompts bounded by their size before they are tokenized, and .jsonl lines before they are read
whole: one 100 MB prompt once took 3.7 minutes and 18.5 GB before the kernel killed the run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from rllib_llm.envs.problem_set import (
    MAX_CHARS_PER_TOKEN,
    load_problem_set,
    max_prompt_chars,
    max_record_bytes,
)

NORMAL = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(40)]


class CountingTokenizer:
    """One token per character, and a record of every text it was asked to tokenize."""

    chat_template = None

    def __init__(self):
        self.lengths: list[int] = []

    def __call__(self, text: str) -> dict:
        self.lengths.append(len(text))
        return {"input_ids": [ord(c) for c in text]}


def _load(tokenizer, path, prompt_length: int):
    return load_problem_set(tokenizer, dataset=str(path), split="train", prompt_key="prompt",
                            answer_key="answer", dataset_kwargs={}, prompt_length=prompt_length)


def test_a_prompt_too_long_for_any_tokenizer_is_dropped_without_tokenizing(tmp_path, caplog):
    # A .json list arrives whole (no lines to skip): its prompts are bounded by characters.
    too_long = "1+" * max_prompt_chars(4)  # 2 * 256 * 4 characters: more than 4 tokens can hold
    path = tmp_path / "p.json"
    path.write_text(json.dumps([*NORMAL[:9], {"prompt": too_long, "answer": "2"}]))
    tokenizer = CountingTokenizer()
    problems = _load(tokenizer, path, prompt_length=4)
    assert (len(problems.prompts), problems.num_dropped, problems.num_untokenized) == (9, 1, 1)
    assert max(tokenizer.lengths) == 4  # the long prompt never reached the tokenizer
    assert (f"dropped 1 of 10 prompts longer than prompt_length=4 tokens (or empty) (1 of the "
            f"dropped were too long to tokenize: a prompt over {4 * MAX_CHARS_PER_TOKEN} "
            f"characters, 256 a token, or a .jsonl line over {max_record_bytes(4)} bytes)") in \
        caplog.text


def test_a_line_too_long_to_hold_a_prompt_is_skipped_unread_and_counted(tmp_path, caplog):
    path = tmp_path / "p.jsonl"
    long_line = json.dumps({"prompt": "x" * max_record_bytes(4), "answer": "1"})
    path.write_text("".join(json.dumps(r) + "\n" for r in NORMAL[:5]) + long_line + "\n"
                    + '{"prompt": "1+1=", "answer": "2"}')  # the last line without a newline
    problems = _load(CountingTokenizer(), path, prompt_length=4)
    assert (len(problems.prompts), problems.num_dropped, problems.num_untokenized) == (6, 1, 1)
    assert f"skipped 1 lines longer than {max_record_bytes(4)} bytes unread (lines 6)" in \
        caplog.text
    # Every line over the bound: refused, saying why.
    path.write_text(long_line + "\n")
    with pytest.raises(ValueError, match=r"p.jsonl has no line of at most \d+ bytes: all 1 were "
                       r"skipped unread .*; shorten the records, or raise prompt_length"):
        _load(CountingTokenizer(), path, prompt_length=4)


_MEASURE = """
import json, resource, sys, time
from rllib_llm.envs.problem_set import load_problem_set, load_tokenizer_by_name

def vm_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()

tokenizer = load_tokenizer_by_name("embedded")
# Address space capped at what is mapped now plus 2 GiB: the code before the bound took ~400 MB
# per MB of prompt, so it fails here with MemoryError instead of taking the machine down.
limit = vm_bytes() + (2 << 30)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
problems = load_problem_set(tokenizer, dataset=sys.argv[1], split="train", prompt_key="prompt",
                            answer_key="answer", dataset_kwargs={}, prompt_length=64)
print(json.dumps({"seconds": time.perf_counter() - start,
                  "growth_mib": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024,
                  "kept": len(problems.prompts), "dropped": problems.num_dropped}))
"""


def test_one_huge_line_costs_seconds_and_little_memory(tmp_path):
    # 40 normal rows and one 40 MiB prompt, written in chunks (this process never holds it).
    path = tmp_path / "huge.jsonl"
    with path.open("w") as f:
        for record in NORMAL:
            f.write(json.dumps(record) + "\n")
        f.write('{"prompt": "')
        for _ in range(40):
            f.write("1+" * (1 << 19))
        f.write('1=", "answer": "2"}\n')
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(path)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    measured = json.loads(out.stdout.strip().splitlines()[-1])
    assert (measured["kept"], measured["dropped"]) == (40, 1)
    # The line is 40 MiB: a peak that grew by less than half of it never held the line whole.
    assert measured["growth_mib"] < 20, measured
    assert measured["seconds"] < 10, measured
