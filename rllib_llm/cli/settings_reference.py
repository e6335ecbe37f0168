"""The settings reference: every RLVRConfig field, the `run:` and `tune:` settings of the CLI's
config files and the stable metric names, as Markdown tables generated from the tables that
declare them (docs/SETTINGS.md is this output; `rllib-llm --help` reads the same tables).

    python -m rllib_llm.cli.settings_reference                           # print the tables
    python -m rllib_llm.cli.settings_reference --write docs/SETTINGS.md  # rewrite its block
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rllib_llm.algorithm.fields import Field, reference_markdown

BEGIN = ("<!-- settings:begin (python -m rllib_llm.cli.settings_reference --write "
         "docs/SETTINGS.md) -->")
END = "<!-- settings:end -->"


def _table(fields: tuple[Field, ...]) -> str:
    rows = ["| setting | default | meaning |", "|---|---|---|"]
    rows += [f"| `{f.name}` | `{f.default!r}` | {f.doc} |" for f in fields]
    return "\n".join(rows)


def settings_markdown() -> str:
    from rllib_llm.cli.run_settings import RUN_FIELDS, TUNE_FIELDS
    from rllib_llm.outputs.metric_names import metrics_markdown

    return "\n\n".join([
        "### RLVRConfig fields (`.training(...)`, a config file's `training:`)",
        reference_markdown(),
        "### `run:` (config files of `rllib-llm train` and `sweep`)",
        _table(RUN_FIELDS),
        "### `tune:` (sweep files)",
        _table(TUNE_FIELDS),
        "### Metric names (Tune's `metric`, checkpoint scores, plots)",
        metrics_markdown(),
    ])


def reference_block() -> str:
    return f"{BEGIN}\n\n{settings_markdown()}\n\n{END}"


def update_reference(path: Path) -> None:
    text = path.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    path.write_text(text[:start] + reference_block() + text[end:])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="rewrite this file's settings block")
    args = parser.parse_args()
    if args.write:
        update_reference(args.write)
    else:
        print(settings_markdown())
