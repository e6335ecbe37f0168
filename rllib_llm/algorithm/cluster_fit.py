"""Whether the Ray cluster can hold the actors a config asks for, checked when RLVR is built.

RLlib creates its env runner and learner actors and waits for each to start; an actor asking
for more CPUs or GPUs than the cluster has waits forever, with no message (a 2-CPU machine with
`num_learners=2, num_env_runners=1` and RLlib's default of 1 CPU each hung in `build_algo()`).
`fit_check` says within seconds what is asked and what the cluster has: an error where nothing
can add nodes (the cluster was started by `ray.init()` in this process), else a warning, repeated
while the build waits (an autoscaler may be adding nodes).

What is asked comes from RLlib's own resource request (`Algorithm.default_resource_request`),
less its first bundle, the main process: outside Tune that is the driver itself, which holds no
Ray resources (a config asking 1 CPU for it and 1.5 for its actors builds on 2 CPUs). Inside a
Tune trial the whole request is the trial's placement group, which Tune reserved before
starting it, so there is nothing left to check.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

import ray

logger = logging.getLogger(__name__)

# Seconds between repeats of the warning while the build waits for resources (Tune's own
# insufficient-resources warning waits 60 s too).
WARN_EVERY_S = 60.0


def actor_groups(config, *, with_main_process: bool = False
                 ) -> list[tuple[str, int, dict[str, float], dict[str, Any]]]:
    """(group, actors, resources of one, the settings that set them) for each group of actors
    the config asks Ray for: env runners, evaluation env runners, learners, and with
    `with_main_process` the main process (a Tune trial's). The resources are RLlib's bundles
    (`default_resource_request`, in its order: the main process, the env runners, the
    evaluation runners, the learners)."""
    bundles = [dict(b) for b in config.algo_class.default_resource_request(config).bundles]
    main, actors = bundles[0], bundles[1:]  # the main process: the driver outside Tune
    num_runners = config.num_env_runners
    # RLlib's learner bundles: one per learner, or without remote learners one per aggregator.
    num_learners = config.num_learners or config.num_aggregator_actors_per_learner
    runners = actors[:num_runners]
    learners = actors[len(actors) - num_learners:] if num_learners else []
    evaluation = actors[num_runners:len(actors) - len(learners)]
    eval_config = config.get_evaluation_config_object()
    groups = [
        ("env runner", runners, {"num_env_runners": num_runners,
                                 "num_cpus_per_env_runner": config.num_cpus_per_env_runner,
                                 "num_gpus_per_env_runner": config.num_gpus_per_env_runner}),
        ("evaluation env runner", evaluation, {
            "evaluation_num_env_runners": config.evaluation_num_env_runners,
            "evaluation_config['num_cpus_per_env_runner']": eval_config.num_cpus_per_env_runner,
            "evaluation_config['num_gpus_per_env_runner']": eval_config.num_gpus_per_env_runner}),
        ("learner" if config.num_learners else "aggregator actor", learners, {
            "num_learners": config.num_learners,
            "num_cpus_per_learner": config.num_cpus_per_learner,
            "num_gpus_per_learner": config.num_gpus_per_learner}),
    ]
    if with_main_process:
        # Without remote learners the local learner runs in the main process (its CPUs/GPUs).
        local = {} if config.num_learners else {
            "num_cpus_per_learner": config.num_cpus_per_learner,
            "num_gpus_per_learner": config.num_gpus_per_learner}
        groups.insert(0, ("main process", [main], {
            "num_learners": config.num_learners,
            "num_cpus_for_main_process": config.num_cpus_for_main_process, **local}))
    # The bundles of a group are alike: each actor's is its first.
    return [(name, len(group), _sum(group[:1]), settings) for name, group, settings in groups
            if group]


def shortfall(config, cluster: dict[str, float], *, with_main_process: bool = False
              ) -> tuple[str, str] | None:
    """What the config's actors ask for beyond `cluster` (Ray's cluster resources), as (what is
    asked and what the cluster has, the settings to lower); None when they fit."""
    groups = actor_groups(config, with_main_process=with_main_process)
    total = _sum([_times(one, n) for _, n, one, _ in groups])
    short = [name for name, amount in total.items() if amount > cluster.get(name, 0.0) + 1e-9]
    if not short:
        return None
    parts, settings = [], []
    for group, n, one, named in groups:
        if not any(one.get(name, 0.0) > 0 for name in short):
            continue
        count, *per_actor = named
        lower = [k for k in per_actor if any(f"_{r.lower()}s_" in k for r in short)]
        if group != "main process":
            lower.append(count)  # fewer of them (the main process is one)
        shown = ([] if group == "main process" else [count]) + [k for k in lower if k != count]
        head = ("the main process, " if group == "main process"
                else f"{n} {group}{'s' if n > 1 else ''} x ")
        parts.append(f"{head}{_words(one, short)}: "
                     f"{', '.join(f'{k}={named[k]!r}' for k in shown)}")
        settings += lower
    asks = "a trial asks" if with_main_process else "the config's actors ask"
    return (f"{asks} Ray for {_words(total, short)} ({'; '.join(parts)}), but "
            f"the cluster has {_words(cluster, short)}",
            f"lower {', '.join(dict.fromkeys(settings))} (fractions such as 0.5 work)")


def fit_check(config, *, can_grow: bool | None = None,
              every_s: float = WARN_EVERY_S) -> contextlib.AbstractContextManager:
    """A context for building the config's actors: raises ValueError at once when they cannot
    fit the cluster and nothing can add nodes to it; warns (now, and every `every_s` seconds
    until the context ends) when they do not fit yet but the cluster may grow.

    can_grow: whether nodes can be added; None = unless Ray was started by `ray.init()` in this
        process (a local cluster has no autoscaler).
    """
    if ray.util.get_current_placement_group() is not None:
        return contextlib.nullcontext()  # a Tune trial: Tune reserved the whole request
    if not actor_groups(config):
        return contextlib.nullcontext()  # everything runs in this process
    if not ray.is_initialized():
        # What creating the first actor would do (Ray's auto-init), a moment earlier.
        from ray._private.auto_init_hook import auto_init_ray

        auto_init_ray()
    missing = shortfall(config, ray.cluster_resources())
    if missing is None:
        return contextlib.nullcontext()
    asked, fix = missing
    if can_grow is None:
        can_grow = not _started_here()
    if not can_grow:
        raise ValueError(
            f"RLVR: {asked}, and no node can join it (Ray was started by ray.init() in this "
            f"process), so the actors would wait forever; {fix}, or start Ray with more "
            "(ray.init(num_cpus=..., num_gpus=...))."
        )
    return _repeated_warning(
        f"RLVR: {asked}; building waits until nodes join the cluster (an autoscaler), else "
        f"forever: {fix}.", every_s)


def check_trial_fits(config) -> None:
    """For a Tune run (`rllib-llm train`) on a cluster started in this process: raise ValueError
    if one trial's whole request (its main process included) does not fit it. Tune would keep
    the trial pending forever (warning after a minute); a cluster that may grow is left to it.
    """
    if not _started_here():
        return
    missing = shortfall(config, ray.cluster_resources(), with_main_process=True)
    if missing is not None:
        asked, fix = missing
        raise ValueError(f"RLVR: {asked}, and no node can join it (Ray was started by this "
                         f"process), so the trial would wait forever; {fix}.")


@contextlib.contextmanager
def _repeated_warning(message: str, every_s: float) -> Iterator[None]:
    logger.warning(message)
    done = threading.Event()

    def repeat() -> None:
        while not done.wait(every_s):
            logger.warning(message)

    thread = threading.Thread(target=repeat, daemon=True, name="rlvr-resource-warning")
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _started_here() -> bool:
    """Whether this process started the Ray cluster with `ray.init()` (a local one: no
    autoscaler, no other node can join)."""
    from ray._private import worker

    node = getattr(worker, "_global_node", None)
    return bool(getattr(node, "ray_init_cluster", False))


def _sum(bundles: list[dict[str, float]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for bundle in bundles:
        for name, amount in bundle.items():
            if amount:
                total[name] = total.get(name, 0.0) + float(amount)
    return total


def _times(bundle: dict[str, float], n: int) -> dict[str, float]:
    return {name: amount * n for name, amount in bundle.items()}


def _words(resources: dict[str, float], names: list[str]) -> str:
    return " and ".join(f"{resources.get(name, 0.0):g} {name}" for name in names)
