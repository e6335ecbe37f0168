"""User registrations reach Ray's other processes, and an estimator declares what it needs.

A pg variant and an advantage estimator registered here, in the driver, train in a remote
learner (its own process, which imports rllib_llm afresh); `needs_groups` decides whether
num_return_sequences_in_group=1 is accepted.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rllib_llm import core
from rllib_llm.recipes.embedded import embedded_config

TINY = dict(rollout_batch_size=2, num_return_sequences_in_group=2, response_length=4)
CONSTANT_ADVANTAGE = 7.0


@pytest.fixture(scope="module")
def user():
    """Register a user's pg variant and estimators in the driver, as a training script would
    (when the tests run, not when pytest collects them: other modules check lists of names).

    Ray pickles a script's functions by value and a module's by reference; these are nested,
    so they travel by value like a script's, and the remote processes need not import this file.
    """

    @core.register_pg_variant("test_user_vanilla", override=True)
    def user_vanilla(logp, old_logp, advantages, mask, *, scores=None, scale: float = 1.0):
        """REINFORCE scaled by `scale`, reporting the advantages it was given."""
        return -scale * advantages * logp, {"user_advantage": advantages,
                                            "user_scale": 0 * logp + scale}

    @core.register_adv_estimator("test_user_constant", needs_groups=False, override=True)
    def user_constant(inputs: core.EstimatorInputs):
        """Advantage CONSTANT_ADVANTAGE on every response token, whatever the scores."""
        constant = CONSTANT_ADVANTAGE * inputs.mask.to(inputs.scores.dtype)
        return constant, constant

    @core.register_adv_estimator("test_user_grouped", needs_groups=True, override=True)
    def user_grouped(inputs: core.EstimatorInputs):
        return core.group_adv_estimator("grpo")(inputs)

    yield SimpleNamespace(vanilla=user_vanilla, constant=user_constant, grouped=user_grouped)
    core.PG_VARIANT_REGISTRY.unregister("test_user_vanilla")
    for name in ("test_user_constant", "test_user_grouped"):
        core.ADV_ESTIMATOR_REGISTRY.unregister(name)


def user_config(**overrides):
    return embedded_config("test_user_vanilla", **{
        **TINY, "adv_estimator": "test_user_constant", "pg_variant_kwargs": {"scale": 0.5},
        "whiten_advantages": False, "advantage_clip": None, **overrides,
    })


@pytest.mark.usefixtures("ray_session", "user")
def test_user_registrations_train_in_remote_learner_and_runners():
    algo = (user_config()
            .env_runners(num_env_runners=2, num_cpus_per_env_runner=0.5)
            .learners(num_learners=1)
            .build_algo())
    result = algo.train()
    learner = result["learners"]["default_policy"]
    # The remote learner ran the user's estimator (every advantage 7) and the user's loss, with
    # its parameter from pg_variant_kwargs.
    assert learner["user_advantage"] == CONSTANT_ADVANTAGE
    assert learner["user_scale"] == 0.5
    assert result["env_runners"]["num_env_steps_sampled_lifetime"] > 0
    algo.stop()


@pytest.mark.usefixtures("ray_session", "user")
def test_a_tune_trial_knows_the_users_registrations(tmp_path):
    """Tune rebuilds the config from its dict in the trial's own process."""
    from ray import tune

    from rllib_llm import RLVR

    tuner = tune.Tuner(RLVR, param_space=user_config(), run_config=tune.RunConfig(
        stop={"training_iteration": 1}, storage_path=str(tmp_path), verbose=0))
    results = tuner.fit()
    assert not results.errors
    assert results[0].metrics["learners"]["default_policy"]["user_advantage"] == \
        CONSTANT_ADVANTAGE


def test_config_captures_user_registrations(user):
    cfg = user_config()
    cfg.validate()
    captured = cfg.user_registrations
    assert captured["pg_variant"]["test_user_vanilla"][0] is user.vanilla
    assert captured["adv_estimator"]["test_user_constant"] == (
        user.constant, core.AdvEstimatorInfo(needs_groups=False))
    assert "ppo" not in captured["pg_variant"]  # built-ins are known everywhere


def test_restore_files_entries_in_a_fresh_registry_without_replacing_own_ones():
    def builtin(): ...
    def mine(): ...
    def sent(): ...

    registry = core.Registry("pg_variant", "register_pg_variant")
    registry.register("builtin")(builtin)
    registry.mark_builtins()
    assert registry.user_entries() == {}
    registry.register("mine", info="declared")(mine)
    assert registry.user_entries() == {"mine": (mine, "declared")}
    registry.restore({"mine": (sent, None), "builtin": (sent, None), "other": (sent, "x")})
    assert registry.get("mine") is mine  # this process's own registration stays
    assert registry.get("builtin") is sent  # the sender overrode the built-in
    assert (registry.get("other"), registry.info("other")) == (sent, "x")
    registry.unregister("builtin")  # the built-in comes back
    registry.unregister("other")
    assert registry.get("builtin") is builtin and "other" not in registry
    with pytest.raises(ValueError, match=r"pg_variant='builtin' is not a user registration \(user "
                                         r"registrations: \['mine'\]\); built-in names cannot be "
                                         r"removed"):
        registry.unregister("builtin")


@pytest.mark.parametrize("estimator, accepted", [("test_user_constant", True),
                                                 ("test_user_grouped", False),
                                                 ("grpo", False), ("reinforce", True)])
@pytest.mark.usefixtures("user")
def test_needs_groups_decides_whether_groups_of_one_are_accepted(estimator, accepted):
    cfg = embedded_config("ppo", adv_estimator=estimator, num_return_sequences_in_group=1)
    if accepted:
        cfg.validate()
    else:
        with pytest.raises(ValueError, match=f"num_return_sequences_in_group=1 is too small for "
                                             f"adv_estimator='{estimator}'"):
            cfg.validate()


def test_register_adv_estimator_needs_a_declaration():
    with pytest.raises(TypeError, match="needs_groups"):
        core.register_adv_estimator("test_undeclared")
    with pytest.raises(ValueError, match=r"register_adv_estimator\('test_bad'\) got "
                                         r"needs_groups='yes'.*pass True or False"):
        core.register_adv_estimator("test_bad", needs_groups="yes")
    assert "test_undeclared" not in core.registered_names("adv_estimator")


def test_a_critic_comes_with_the_estimators_that_declare_one():
    assert core.adv_estimator_info("gae") == core.AdvEstimatorInfo(needs_groups=False,
                                                                   needs_critic=True)
    assert embedded_config("ppo", adv_estimator="gae").critic_spec == {
        "model_name_or_path": "embedded", "shares_trunk": False}
    assert embedded_config("ppo", adv_estimator="grpo").critic_spec is None


def test_restore_rejects_an_unknown_kind():
    with pytest.raises(ValueError, match="kind='optimizer' cannot be restored; valid kinds: "
                                         "'pg_variant'"):
        core.restore_registrations({"optimizer": {"adam": (torch.optim.Adam, None)}})
