"""A remote learner that dies during an update: training stops with one line naming it.

RLlib restarts no learner, and with several (num_learners >= 2) the learners are one torch DDP
group, which cannot take a new process in a dead rank's place mid-run. The ranks alive fail in
their next collective with the backend's own error ("Connection closed by peer" from gloo), and
`LearnerGroup.update` raises the first error of its list, often a survivor's, which points at
the wrong learner. So the update asks every learner whether it is there, and names the dead.
What was trained is in the last checkpoint, which this error neither writes nor deletes.
"""

from __future__ import annotations

from ray.exceptions import ActorDiedError

# How long the learners alive get to answer "are you there?" after a failed update.
PROBE_TIMEOUT_S = 30.0


def dead_learners(learner_group) -> list[int]:
    """The learners (numbered 0.., their DDP rank) whose Ray actor has died: those whose answer
    to a no-op call, sent to every learner, the ones RLlib has marked unhealthy included, is
    Ray's ActorDiedError."""
    results = learner_group.foreach_learner(lambda learner: None, healthy_only=False,
                                            timeout_seconds=PROBE_TIMEOUT_S)
    return sorted(r.actor_id for r in results if isinstance(r.get(), ActorDiedError))


def learners_died(dead: list[int], num_learners: int) -> RuntimeError:
    """The one-line error that stops training."""
    who = f"learner {dead[0]}" if len(dead) == 1 else \
        f"learners {', '.join(map(str, dead))}"
    group = ", and a data-parallel group cannot go on without one" if num_learners > 1 else ""
    return RuntimeError(
        f"{who} of {num_learners} (numbered from 0) died during the update (Ray logged why); "
        f"RLlib restarts no learner{group}: resume from the last checkpoint "
        "(rllib-llm train --resume RUN_DIR, or Algorithm.restore).")
