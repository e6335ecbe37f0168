"""pass@k: the chance that at least one of k responses to a problem is correct, estimated without
bias from n >= k sampled responses of which c are correct (Chen et al. 2021, "Evaluating Large
Language Models Trained on Code", arXiv:2107.03374, eq. 1 and its numerically stable form):

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n - c + 1}^{n} (1 - k / i)

pass@1 is c / n, the mean correctness of the n responses.
"""

from __future__ import annotations

import torch
from torch import Tensor


def pass_at_k(num_correct: Tensor, num_samples: int, k: int) -> Tensor:
    """Per-problem unbiased pass@k.

    Args:
        num_correct: [P] correct responses c of each problem, integers in [0, n].
        num_samples: responses n sampled per problem, >= 1.
        k: responses the estimate is for, in [1, n].

    Returns:
        [P] float64 pass@k of each problem (average them for a data set's).
    """
    n = num_samples
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: k={k} must be in [1, num_samples={n}]; sample at least k "
                         "responses per problem.")
    c = num_correct.to(torch.float64)  # (P,)
    if c.dim() != 1 or bool(((c < 0) | (c > n) | (c != c.round())).any()):
        raise ValueError(f"pass_at_k: num_correct must be a 1-D tensor of integers in [0, {n}], "
                         f"got {num_correct.tolist()}.")
    i = torch.arange(1, n + 1, dtype=torch.float64)  # (n,)
    # Factors i <= n - c are 1. When n - c < k the range holds i = k, whose factor 0 makes
    # pass@k = 1: every k-subset then contains a correct response.
    factors = torch.where(i > (n - c)[:, None], 1 - k / i, torch.ones((), dtype=torch.float64))
    return 1 - factors.prod(dim=-1)  # (P,)
