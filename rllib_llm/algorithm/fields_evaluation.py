"""The settings of evaluation on held-out problems (the evaluation section of
docs/SETTINGS.md).
"""

from __future__ import annotations

from rllib_llm.algorithm.field_rules import (
    Field,
    optional,
    positive_int,
    text,
)

EVALUATION_FIELDS: tuple[Field, ...] = (
    # --- evaluation -----------------------------------------------------------------------------
    # RLVR.evaluate (RLlib's evaluation step, every evaluation_interval iterations) and
    # RLVR.evaluate_accuracy score held-out problems with the evaluation config: the training
    # config with RLlib's evaluation_config overrides, so temperature, top_p and response_length
    # there are evaluation's own (see RLVR.evaluate).
    Field("eval_dataset", None,
          "Held-out problems: None = the training env's dataset (env_config['dataset']) at "
          "eval_split; or a dataset of their own: 'arithmetic', 'gsm_symbolic', a local "
          ".jsonl/.json/.parquet "
          "file, or a Hugging Face dataset name or directory (read at eval_split). A local file is "
          "one split, so training on one needs an eval_dataset of its own: evaluation refuses to "
          "score the training problems.", optional(text), "evaluation", annotation='Any'),
    Field("eval_split", "test",
          "Split of the held-out problems (ignored for local files).", text, "evaluation"),
    Field("eval_num_problems", 200,
          "Held-out problems scored per evaluation: the first eval_num_problems of the held-out "
          "dataset (all of them if it has fewer), shared out over the evaluation env runners.",
          positive_int, "evaluation"),
    Field("eval_num_samples", 1,
          "Responses sampled per held-out problem (n). pass@1 is the mean correctness of all "
          "n responses (the unbiased estimator c/n of Chen et al. 2021, arXiv:2107.03374), and "
          "pass@k with k = n the share of problems with at least one correct response.",
          positive_int, "evaluation"),
)
