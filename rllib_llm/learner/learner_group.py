"""`RLVRLearnerGroup`: RLlib's LearnerGroup, except that sharded learners (DeepSpeed, FSDP2) hand
over their state together.

RLlib asks one learner (the first healthy one) for the group's state: weight syncs, checkpoints,
`get_weights`. A sharded learner's state is partitioned — Adam's moments under ZeRO-2, the
weights too under ZeRO-3 and FSDP2 — and gathering it is a collective every rank must join, so
here every learner is asked at once and the first rank's answer is the group's (the others gather
their pieces for it and return nothing). `local_learner` is the public way to the learner of a
group that runs in this process. Everything else is RLlib's.
"""

from __future__ import annotations

from pathlib import Path

from ray.rllib.core import COMPONENT_LEARNER
from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.learner.learner_group import LearnerGroup

# The learner strategies whose state is sharded across the learners: gathering it is collective.
SHARDED_STRATEGIES = ("deepspeed", "fsdp2")
# Where FSDP2 learners write their shards in a checkpoint, in the learner's directory.
SHARDS_DIR = "fsdp2_shards"
# The parts of a learner's state that FSDP2 learners save as shards (`save_shards`), not whole.
SHARDED_PARTS = ("learner_group/learner/rl_module", "learner_group/learner/optimizer")


class RLVRLearnerGroup(LearnerGroup):
    @property
    def local_learner(self) -> Learner:
        """The learner of a group that runs in this process (`num_learners=0`); an error for a
        group of remote learners, which `foreach_learner` reaches."""
        if not self.is_local:
            raise RuntimeError("RLVRLearnerGroup.local_learner: the learners are remote "
                               "(num_learners >= 1); reach them with foreach_learner()")
        return self._learner

    def get_state(self, components=None, *, not_components=None, **kwargs):
        if (self.is_local or self.config.learner_strategy not in SHARDED_STRATEGIES
                or not self._check_component(COMPONENT_LEARNER, components, not_components)):
            return super().get_state(components, not_components=not_components, **kwargs)
        comps = self._get_subcomponents(COMPONENT_LEARNER, components)
        not_comps = self._get_subcomponents(COMPONENT_LEARNER, not_components)
        states = self._get_results(self.foreach_learner(
            lambda learner: learner.get_state(comps, not_components=not_comps, **kwargs)))
        (state,) = [s for s in states if s is not None]  # the first rank's
        return {COMPONENT_LEARNER: state}

    @property
    def saves_shards(self) -> bool:
        """Whether the learners write their checkpoint state as shards (FSDP2 learners)."""
        return not self.is_local and self.config.learner_strategy == "fsdp2"

    def save_shards(self, learner_dir) -> None:
        """Every FSDP2 learner writes its shards of the weights and of Adam's state into
        `learner_dir`/SHARDS_DIR (torch.distributed.checkpoint; collective), so a checkpoint
        never gathers them whole."""
        directory = str(Path(learner_dir) / SHARDS_DIR)
        self._get_results(self.foreach_learner(lambda learner: learner.save_shards(directory)))
