"""load_problems: the arithmetic generator, local files, Hugging Face datasets, and every error."""

from __future__ import annotations

import json
import time

import pytest
from rllib_llm.envs import arithmetic_problems, load_problems

GSM8K_LIKE = [
    {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = 7\n#### 7"},
    {"question": "What is 36 times 2?", "answer": "36 * 2 = 72\n#### 72"},
]
EXPECTED = [
    {"prompt": "Tom has 3 apples and buys 4. How many?", "answer": "7"},
    {"prompt": "What is 36 times 2?", "answer": "72"},
]


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_arithmetic_is_the_builtin_generator():
    kwargs = {"seed": 3, "max_operand": 9, "test_size": 10}
    assert load_problems("arithmetic", split="test", **kwargs) == arithmetic_problems(
        "test", **kwargs
    )
    assert load_problems()[0].keys() == {"prompt", "answer"}


def test_arithmetic_multiplication_is_the_tool_task():
    train, test = arithmetic_problems("train", ops="*"), arithmetic_problems("test", ops="*")
    assert len(train) + len(test) == 100 * 100 and len(test) == 500
    assert not {p["prompt"] for p in train} & {p["prompt"] for p in test}
    for p in train[:50] + test:
        a, b = map(int, p["prompt"].rstrip("=").split("*"))
        assert p["answer"] == str(a * b)
    # The default task's split is pinned (the shipped checkpoints were trained on its train split).
    assert [p["prompt"] for p in arithmetic_problems("test")[:3]] == ["5+69=", "23+61=", "62+1="]
    with pytest.raises(ValueError, match=r"ops='\+/' must be a non-empty combination of"):
        arithmetic_problems(ops="+/")


def _twin(prompt: str) -> str | None:
    """`b+a=` for `a+b=` (and `b*a=` for `a*b=`): the same answer; None for a subtraction."""
    for op in "+*":
        if op in prompt:
            a, b = prompt.rstrip("=").split(op)
            return f"{b}{op}{a}="
    return None


@pytest.mark.parametrize("ops", ["+-", "*", "+-*"])
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_arithmetic_split_holds_out_commuted_twins_together(ops, seed):
    # Split problem by problem, 307 of the 500 default test problems had their twin `b+a=` (same
    # answer) in training: held-out accuracy was partly recall. Now a+b/b+a and a*b/b*a share a
    # split.
    train = arithmetic_problems("train", ops=ops, seed=seed)
    test = arithmetic_problems("test", ops=ops, seed=seed)
    train_prompts, test_prompts = {p["prompt"] for p in train}, {p["prompt"] for p in test}
    assert len(test) == len(test_prompts) == 500 and len(train) == len(train_prompts)
    assert not train_prompts & test_prompts
    total = 100 * 100 * ops.count("+") + 5050 * ops.count("-") + 100 * 100 * ops.count("*")
    assert len(train) + len(test) == total
    twins = {_twin(p) for p in test_prompts} - {None}
    assert not twins & train_prompts
    assert twins <= test_prompts  # each held-out addition's twin is held out with it
    # Groups, not problems, are shuffled: the test split keeps the task's mix of operations.
    if ops == "+-":
        additions = sum("+" in p for p in test_prompts)
        assert 300 <= additions <= 365  # 10,000 of the 15,050 problems: 332 expected
    # An odd size is exact too (a pair that would overshoot goes to training).
    small = arithmetic_problems("test", ops=ops, seed=seed, max_operand=9, test_size=11)
    assert len(small) == 11
    assert {_twin(p["prompt"]) for p in small} - {None} <= {p["prompt"] for p in small}
    assert arithmetic_problems("test", ops=ops, seed=seed) == test  # deterministic


def test_gsm_symbolic_ships_gsm8k_style_problems_split_by_template():
    from rllib_llm.envs.gsm_symbolic import _records, gsm_symbolic_problems

    train, test = load_problems("gsm_symbolic"), load_problems("gsm_symbolic", split="test")
    assert len(train) + len(test) == len(_records()) >= 1000
    # Held out by template: no test problem comes from a template the training split holds.
    templates = {r["question"]: r["template"] for r in _records()}
    assert not {templates[p["prompt"]] for p in train} & {templates[p["prompt"]] for p in test}
    assert len({templates[p["prompt"]] for p in test}) == 20
    assert all(p["answer"] and float(p["answer"]) == float(p["answer"]) for p in train + test)
    # GSM8K's originals are among them (template 0's: the shark and its remoras).
    assert any(p["prompt"].startswith("Benny saw a 10-foot shark with 2 6-inch remoras")
               and p["answer"] == "10" for p in train + test)
    assert gsm_symbolic_problems("test", seed=1) != test  # another seed, other templates
    with pytest.raises(ValueError, match="test_templates=100 must be in"):
        gsm_symbolic_problems(test_templates=100)


def test_jsonl_with_custom_keys_and_gsm8k_answers(tmp_path):
    path = write_jsonl(tmp_path / "gsm.jsonl", GSM8K_LIKE)
    assert load_problems(path, prompt_key="question") == EXPECTED
    # A local file is one split: `split` does not change what is read.
    assert load_problems(path, split="test", prompt_key="question") == EXPECTED


def test_json_and_parquet_files(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    json_path = tmp_path / "p.json"
    json_path.write_text(json.dumps(GSM8K_LIKE))
    assert load_problems(str(json_path), prompt_key="question") == EXPECTED
    parquet_path = tmp_path / "p.parquet"
    pq.write_table(pa.Table.from_pylist(GSM8K_LIKE), parquet_path)
    assert load_problems(str(parquet_path), prompt_key="question") == EXPECTED


def test_numeric_answers_become_strings(tmp_path):
    path = write_jsonl(
        tmp_path / "n.jsonl", [{"prompt": "1+1=", "answer": 2}, {"prompt": "x", "answer": 0.5}]
    )
    assert [p["answer"] for p in load_problems(path)] == ["2", "0.5"]


def test_float_answers_become_decimals_a_model_could_write(tmp_path):
    # JSON numbers arrive as floats; str() would turn 1e-05 into "1e-05", which no answer matches.
    floats = [1e-05, 1e20, 0.1, 72.0, 2.5e-07, -3e-3, 123456.789, 1.5e16, 1e23, -0.0]
    path = write_jsonl(tmp_path / "f.jsonl", [{"prompt": "x", "answer": f} for f in floats])
    assert [p["answer"] for p in load_problems(path)] == [
        "0.00001",
        "100000000000000000000",
        "0.1",
        "72",
        "0.00000025",
        "-0.003",
        "123456.789",
        "15000000000000000",
        "100000000000000000000000",  # not int(1e23), 99999999999999991611392
        "-0",
    ]


def test_huggingface_datasets_saved_to_disk_and_data_dirs(tmp_path):
    datasets = pytest.importorskip("datasets")
    train = datasets.Dataset.from_list(GSM8K_LIKE)
    train.save_to_disk(str(tmp_path / "single"))
    assert load_problems(str(tmp_path / "single"), prompt_key="question") == EXPECTED

    splits = datasets.DatasetDict({"train": train, "test": train.select([1])})
    splits.save_to_disk(str(tmp_path / "dict"))
    test = load_problems(str(tmp_path / "dict"), split="test", prompt_key="question")
    assert test == EXPECTED[1:]
    with pytest.raises(
        ValueError,
        match=r"split='valid' is not in the dataset saved at .*; its splits are "
        r"\['test', 'train'\]",
    ):
        load_problems(str(tmp_path / "dict"), split="valid", prompt_key="question")

    # A directory of data files goes through datasets.load_dataset (offline: it is local).
    (tmp_path / "raw").mkdir()
    write_jsonl(tmp_path / "raw" / "train.jsonl", GSM8K_LIKE)
    assert load_problems(str(tmp_path / "raw"), prompt_key="question") == EXPECTED


# --- errors -------------------------------------------------------------------------------------
def test_missing_field_names_it_and_the_fields_that_exist(tmp_path):
    path = write_jsonl(tmp_path / "gsm.jsonl", GSM8K_LIKE)
    with pytest.raises(
        ValueError,
        match=r"prompt_key='prompt' is not a field of .*gsm.jsonl \(.*gsm.jsonl:1\); its fields are "
        r"\['answer', 'question'\]: pass prompt_key=<one of them>",
    ):
        load_problems(path)
    with pytest.raises(ValueError, match=r"answer_key='solution' is not a field of .*\(.*:1\)"):
        load_problems(path, prompt_key="question", answer_key="solution")


def test_a_record_missing_a_field_is_named(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "a", "answer": "1"}, {"prompt": "b"}])
    with pytest.raises(
        ValueError,
        match=r"answer_key='answer' is not a field of .*p.jsonl \(.*p.jsonl:2\); "
        r"its fields are \['prompt'\]",
    ):
        load_problems(path)


@pytest.mark.parametrize(("name", "text", "message"), [
    # A blank line between: the record numbered 1 from 0 was the file's line 3, which is what
    # a JSON error in it says.
    ("p.jsonl", '{"prompt": "a", "answer": "1"}\n\n{"prompt": "", "answer": "2"}\n',
     r"^.*p.jsonl:3: prompt='' must be a non-empty string"),
    ("p.jsonl", '{"prompt": "a", "answer": "1"}\n\n{"prompt": \n', r"p.jsonl:3 is not valid JSON"),
    # Without lines (a .json list, a parquet file, a datasets dataset): counted from 1 too.
    ("p.json", '[{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": null}]',
     r"^record 2 of .*p.json: answer=None must be a string"),
])
def test_records_are_named_from_1_as_json_errors_and_editors_count(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=message):
        load_problems(str(tmp_path / name))


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (
            {"prompt": "", "answer": "1"},
            (
                r"bad.jsonl:1: prompt='' must be a non-empty string; "
                r"fix or drop that record"
            ),
        ),
        ({"prompt": 3, "answer": "1"}, r"bad.jsonl:1: prompt=3 must be a non-empty string"),
        (
            {"prompt": "a", "answer": None},
            (
                r"bad.jsonl:1: answer=None must be a string or a "
                r"number; fix or drop that record"
            ),
        ),
        ({"prompt": "a", "answer": True}, r"answer=True must be a string or a number"),
        (
            {"prompt": "a", "answer": float("nan")},
            r"bad.jsonl:1: answer=nan must be a finite number; fix or drop that record",
        ),
        (
            {"prompt": "a", "answer": "work ####  "},
            (
                r"bad.jsonl:1: answer='work ####  ' holds "
                r"no answer; fix or drop that record"
            ),
        ),
    ],
)
def test_bad_records(tmp_path, record, message):
    with pytest.raises(ValueError, match=message):
        load_problems(write_jsonl(tmp_path / "bad.jsonl", [record]))


def test_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"dataset file '.*nope.jsonl' does not exist"):
        load_problems(str(tmp_path / "nope.jsonl"))
    path = tmp_path / "broken.jsonl"
    path.write_text('{"prompt": "a", "answer": "1"}\n{"prompt": \n')
    with pytest.raises(ValueError, match=r"broken.jsonl:2 is not valid JSON \(.*\); fix or remove"):
        load_problems(str(path))
    path.write_text('["a", "1"]\n')
    with pytest.raises(ValueError, match=r"broken.jsonl:1 holds a list, not an object; write one"):
        load_problems(str(path))
    json_path = tmp_path / "p.json"
    json_path.write_text('{"prompt": "a"}')
    with pytest.raises(ValueError, match=r"p.json' must hold a JSON list of objects, one per"):
        load_problems(str(json_path))


def test_bad_arguments(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "a", "answer": "1"}])
    with pytest.raises(
        ValueError,
        match=r"dataset_kwargs=\['name'\] do not apply to the local "
        r"file .*; remove them",
    ):
        load_problems(path, name="main")
    with pytest.raises(
        ValueError,
        match=r"dataset='' must be a non-empty string; pass "
        r"'arithmetic'",
    ):
        load_problems("")
    with pytest.raises(ValueError, match=r"split='valid' is not one of \('train', 'test'\)"):
        load_problems("arithmetic", split="valid")


def test_non_utf8_files_name_the_byte(tmp_path):
    first = b'{"prompt": "a", "answer": "1"}\n'  # 31 bytes; \xe9 is byte 15 of the next
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(first + b'{"prompt": "caf\xe9", "answer": "2"}\n')
    with pytest.raises(
        ValueError,
        match=r"dataset file '.*latin1.jsonl' is not UTF-8: byte 46 \(line 2\) is b'\\xe9'; a "
        r"dataset file must be UTF-8: re-encode it",
    ):
        load_problems(str(path))
    json_path = tmp_path / "latin1.json"
    json_path.write_bytes(b'[{"prompt": "\xff", "answer": "1"}]')
    message = r"latin1.json' is not UTF-8: byte 13 \(line 1\) is b'\\xff'"
    with pytest.raises(ValueError, match=message):
        load_problems(str(json_path))


def test_a_byte_order_mark_is_no_part_of_the_text(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(GSM8K_LIKE[0]).encode() + b"\n")
    assert load_problems(str(path), prompt_key="question") == EXPECTED[:1]


@pytest.mark.parametrize("suffix", [".csv", ".txt", ".tsv", ""])
def test_unsupported_data_files_are_refused_at_once(tmp_path, suffix):
    path = tmp_path / f"problems{suffix}"
    path.write_text("prompt,answer\n1+1=,2\n")
    start = time.perf_counter()
    with pytest.raises(
        ValueError,
        match=rf"dataset file '.*problems{suffix}' has the suffix '{suffix}', which is not read "
        r"here; the supported suffixes are \['.jsonl', '.json', '.parquet'\]: convert it to "
        r".jsonl, or name a datasets builder, e.g. dataset='csv', dataset_kwargs=",
    ):
        load_problems(str(path))
    assert time.perf_counter() - start < 5.0  # not a trip to the hub


def test_a_csv_file_through_the_datasets_builder_the_message_names(tmp_path):
    pytest.importorskip("datasets")
    path = tmp_path / "problems.csv"
    path.write_text("question,answer\nWhat is 36 times 2?,72\n")
    problems = load_problems("csv", prompt_key="question", data_files=str(path))
    assert problems == [{"prompt": "What is 36 times 2?", "answer": "72"}]


@pytest.mark.parametrize("name", ["/no/such/problems.csv", "./no_such_dir", "~/no_such_data_x"])
def test_missing_local_paths_are_refused_at_once(name):
    with pytest.raises(FileNotFoundError, match=rf"dataset path '{name}' does not exist; check"):
        load_problems(name)


def test_a_directory_or_a_fifo_is_refused_as_what_it_is(tmp_path):
    """Both were reported as "does not exist", which sends a user looking for a typo."""
    import os

    (tmp_path / "p.jsonl").mkdir()
    with pytest.raises(ValueError, match=r"^dataset file '.*/p.jsonl' is a directory, not a file; "
                       r"name the .jsonl file inside it, or a directory without the suffix \(a "
                       r"Hugging Face dataset directory\)$"):
        load_problems(str(tmp_path / "p.jsonl"))
    for name in ("q.jsonl", "fifo"):  # a data file's suffix, or none (a hub name's shape)
        os.mkfifo(tmp_path / name)
        start = time.perf_counter()
        with pytest.raises(ValueError, match=rf"^dataset '.*/{name}' is not a regular file \(a "
                           r"FIFO, a socket or a device\); write the problems to a file and "
                           r"name that$"):
            load_problems(str(tmp_path / name))
        assert time.perf_counter() - start < 5.0  # not blocked opening it, not sent to the hub


def test_repeated_prompts_are_warned_about_once_with_their_count(tmp_path, caplog):
    records = [{"prompt": "1+1=", "answer": "2"}] * 50 + [{"prompt": "2+2=", "answer": "4"}]
    with caplog.at_level("WARNING", logger="rllib_llm.envs.datasets"):
        problems = load_problems(write_jsonl(tmp_path / "p.jsonl", records))
    assert len(problems) == 51  # legal: kept, and said
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'p.jsonl'}: 49 of its 51 problems repeat an earlier prompt (2 distinct; "
        "e.g. problem 2 repeats problem 1): they are sampled more often than the others; drop "
        "the repeats if that is not meant"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="rllib_llm.envs.datasets"):
        load_problems(write_jsonl(tmp_path / "q.jsonl", records[-2:]))
    assert not caplog.records
