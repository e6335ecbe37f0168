"""matplotlib's pyplot for the figures a run leaves behind (`run_log.plot_reward_curve`,
`plots`): imported only when a figure is drawn, since matplotlib is an optional dependency
(`rllib_llm[plot]`).
"""

from __future__ import annotations

MATPLOTLIB_MISSING = "matplotlib is not installed: pip install 'rllib_llm[plot]'"


def import_pyplot():
    """matplotlib.pyplot on the file-only Agg backend; ImportError saying what to install."""
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError(MATPLOTLIB_MISSING) from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
