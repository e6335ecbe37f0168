"""ROLL's TOPR config (roll_topr.yaml) trains the embedded model: roll_ppo.py's run on that file.

    python examples/roll_topr.py [--iterations 600] [--min-gain 20]

ROLL's TOPR recipe is its PPO file with the policy-gradient term switched off (rl_loss_coef 0,
which also silences its KL loss) and two loss terms on instead: the plain REINFORCE term on the
correct responses (positive_loss_coef) and the ratio-truncated one on the others
(use_topr_neg_loss_coef). The advantages still come from the critic (adv_estimator gae).
"""

import sys

from roll_ppo import main, parse_args

if __name__ == "__main__":
    args = parse_args("roll_topr.yaml")
    sys.exit(0 if main(args.config, args.iterations, args.eval_problems, args.min_gain) else 1)
