"""On-policy distillation: a frozen teacher's per-token log-probs on the student's own samples as
a dense learning signal.

The student samples a response y; the teacher scores each sampled token. With s_t = log
pi_student(y_t | y_<t) (the sampler's, or the recomputed old log-probs) and u_t = log
pi_teacher(y_t | y_<t), both of logits / temperature,

    r_t = s_t - u_t

is the one-sample estimate of the per-token reverse KL, KL(pi_student || pi_teacher) at that
prefix (Schulman's k1; its mean over the student's own tokens is unbiased). Its negative is the
token's distillation advantage: a token the teacher finds likelier than the student gets pushed
up, one the teacher finds unlikely gets pushed down. The policy gradient of -r_t on the
student's samples is the gradient of the reverse KL with no discounting: each token is charged
its own term only, as in Thinking Machines' "On-Policy Distillation" (Lu et al., 2025; Tinker's
cookbook uses discount 0) and the reverse-KL case of GKD (Agarwal et al., arXiv:2306.13649;
TRL's GKDTrainer with beta = 1 and NeMo-RL's distillation with kl_type "reverse" compute the same
divergence as a loss, over the whole vocabulary or the teacher's top-k, instead of from the
sampled token). With a verifier reward too, the advantage of each token is

    A_t = verifier_coef * A_verifier_t - distillation_coef * r_t

A_verifier being the estimator's advantage after its own normalisation and clipping, so that the
teacher's term keeps its scale (in nats per token) whatever the group statistics do.
"""

from __future__ import annotations

from torch import Tensor

from rllib_llm.core.masked import check_same_shape, compute_dtype, masked_mean, zero_masked


def reverse_kl_per_token(student_logp: Tensor, teacher_logp: Tensor, mask: Tensor) -> Tensor:
    """r_t = student_logp - teacher_logp on mask tokens, 0 elsewhere: [B, T] in the compute dtype.

    Args:
        student_logp: [B, T] log-probs of the sampled tokens under the student that sampled them.
        teacher_logp: [B, T] log-probs of the same tokens under the teacher.
        mask: [B, T] binary; 1 on the tokens the student generated.
    """
    check_same_shape({"student_logp": student_logp, "teacher_logp": teacher_logp, "mask": mask},
                     "reverse_kl_per_token")
    dtype = compute_dtype(student_logp, teacher_logp)
    return zero_masked(student_logp.detach().to(dtype) - teacher_logp.detach().to(dtype),
                       mask, dtype)


def mean_reverse_kl(reverse_kl: Tensor, mask: Tensor) -> Tensor:
    """The batch's mean per-token reverse KL estimate over mask tokens (0 without tokens)."""
    return masked_mean(reverse_kl, mask)


def distillation_advantages(verifier_advantages: Tensor, reverse_kl: Tensor, mask: Tensor, *,
                            distillation_coef: float, verifier_coef: float = 1.0) -> Tensor:
    """A_t = verifier_coef * verifier_advantages - distillation_coef * reverse_kl on mask tokens,
    0 elsewhere: [B, T] in the compute dtype.

    Args:
        verifier_advantages: [B, T] the advantage estimator's output (from the verifier reward).
        reverse_kl: [B, T] `reverse_kl_per_token`.
        mask: [B, T] binary.
        distillation_coef: weight of the teacher's term, >= 0.
        verifier_coef: weight of the verifier's advantages, >= 0; 0 = distillation alone.
    """
    check_same_shape({"verifier_advantages": verifier_advantages, "reverse_kl": reverse_kl,
                      "mask": mask}, "distillation_advantages")
    for name, value in (("distillation_coef", distillation_coef),
                        ("verifier_coef", verifier_coef)):
        if not value >= 0:
            raise ValueError(f"distillation_advantages: {name}={value!r} must be >= 0")
    dtype = compute_dtype(verifier_advantages, reverse_kl)
    combined = verifier_coef * verifier_advantages.to(dtype) - distillation_coef * reverse_kl.to(
        dtype)
    return zero_masked(combined, mask, dtype)
