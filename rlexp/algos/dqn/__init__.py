"""DQN (Mnih et al. 2015) and its proven extensions: double Q-learning, dueling heads, n-step returns,
proportional prioritized replay, distributional heads (C51, QR-DQN) and noisy networks, for discrete
actions (``algo=rainbow`` turns all six of Rainbow's parts on; ``algo=c51`` and ``algo=qrdqn`` are the
distributional agents alone). It trains with the off-policy family's loop
(:mod:`rlexp.algos.off_policy`): replay, bursts of gradient steps (``update_every``, ``utd_ratio``),
evaluation and checkpoints are the ones DDPG, TD3 and SAC use.

What each key means is written beside it in ``conf/algo/dqn.yaml``; in words:

- **Acting.** For the first ``start_steps`` env steps (all ranks) actions are uniformly random; after
  that epsilon-greedy: with probability epsilon a uniformly random action, else ``argmax_a Q(s, a)``.
  Epsilon falls linearly from ``eps_start`` to ``eps_end`` over the first ``exploration_steps`` env
  steps of the run (all ranks and envs together), and stays there. Test episodes are greedy.
- **Learning.** Each gradient step minimises the ``loss`` (Huber with delta 1, or squared error)
  between Q(s, a) and the target ``R + discount * (1 - done) * Q_targ(s', a')``, where R is the
  (n-step) return, discount is gamma^k for the k rewards it holds, and ``a' = argmax Q_targ(s', .)``
  or, with ``double_q``, ``argmax Q(s', .)`` (the online network chooses, the target network
  evaluates). The gradient's global norm is clipped to ``max_grad_norm``; the optimizer is Adam or
  centred RMSProp with ``lr`` and ``optim_eps``.
- **Target network.** Every ``target_update_every`` env steps (all ranks) the target network becomes
  ``polyak * targ + (1 - polyak) * Q``: a copy with ``polyak = 0`` (the Nature DQN), a slow average
  with a ``polyak`` near 1 and a small ``target_update_every``.
- **Dueling.** The network's last hidden layer becomes two streams of the same width, one for V(s)
  and one for the advantages A(s, .); Q = V + A - mean(A). Without hidden layers (a CNN's features
  only) the two heads are linear.
- **n-step returns.** Transitions carry the discounted sum of up to ``n_step`` rewards and bootstrap
  from the observation after them; an episode that ends first cuts them (a termination does not
  bootstrap, a truncation does).
- **Prioritized replay.** Transitions are sampled in proportion to ``(|TD error| + per_eps) ** per_alpha``
  (new ones at the largest priority so far) and their loss weighted by ``(N P(i)) ** -beta`` over its
  largest value, beta rising linearly from ``per_beta0`` to 1 over ``per_beta_steps`` env steps (by
  default the whole run, ``epochs * steps_per_epoch``: 1 at the end of training, as in the PER paper).
  ``per_weights`` says which largest value: ``buffer``, the largest any stored transition could get
  (OpenAI baselines'), or ``batch``, the largest in the minibatch (Dopamine's, CleanRL's). Over the
  buffer, one transition of near-zero loss anywhere in it shrinks every weight, and with them the
  gradient, to the size that Adam's epsilon then dominates.

- **Distributional heads** (``distributional``). ``c51`` (Bellemare et al. 2017): each action's
  return is a categorical distribution over ``num_atoms`` fixed atoms evenly spaced on [``v_min``,
  ``v_max``] (the network gives its logits; Q is its mean). The target distribution is the target
  network's at the next action (chosen by the target network's Q, or with ``double_q`` the online
  network's), its atoms moved to ``R + discount (1 - done) z`` and clipped to [v_min, v_max], then
  projected back onto the atoms (each moved atom's probability split between its two neighbours in
  proportion to how near it lies); the loss is the cross-entropy of the network's distribution at the
  taken action against it. ``qr`` (QR-DQN, Dabney et al. 2018): each action's return is given by
  ``num_quantiles`` quantiles at the levels (2i + 1) / (2 num_quantiles) (Q is their mean); the target
  quantiles are ``R + discount (1 - done)`` times the target network's at the next action (chosen as
  above), and the loss is the quantile Huber loss (kappa 1) summed over the quantiles and averaged over
  the target samples and the batch (sb3-contrib's). With prioritized replay a transition's priority is
  its own loss (cross-entropy or quantile Huber, plus ``per_eps``), as in Rainbow; ``loss`` stays
  ``huber`` (each head has its own loss).
- **Noisy networks** (``noisy``, Fortunato et al. 2018): every linear layer after the encoder becomes a
  factorised Gaussian noisy layer, ``W + W_sigma * (f(eps_out) f(eps_in)^T)`` and ``b + b_sigma *
  f(eps_out)`` with f(x) = sign(x) sqrt(|x|), the scales learnt from ``noisy_sigma0 / sqrt(in)``. The
  network explores by its noise: after ``start_steps`` every exploring action is greedy under fresh
  draws (from the learner's numpy generator), and epsilon-greedy is off (epsilon 0; ``eps_start``,
  ``eps_end`` and ``exploration_steps`` are not used, and a run that sets them says so in one line).
  Each gradient step draws fresh noise for the online network (used for s and, with ``double_q``, to
  choose at s') and, independently, for the target network (from the learner's torch or TF generator).
  Test episodes and loaded policies act greedily with the mean network (no noise).
- **Learning-rate annealing** (``anneal_lr``): ``lr`` falls linearly to 0 over the run
  (``lr * (1 - steps / (epochs * steps_per_epoch))`` after each env step: SB3's ``lin_`` schedules), so
  such a run is not extended by ``resume=`` with other ``algo.epochs``.

With ``comm.procs = N`` the counting keys mean what they mean for SAC (rlexp/algos/off_policy.py):
``start_steps``, ``update_after``, ``exploration_steps``, ``target_update_every`` and
``per_beta_steps`` count the env steps of all ranks and envs; ``update_every`` and ``utd_ratio`` those
of one rank; ``replay_size`` and ``batch_size`` are split over the ranks, each rank sampling its share
from its own replay (with its own priorities) and the gradients averaged. Frame stacks (e.g. Atari's
4 x 84 x 84) are stored a frame at a time (:class:`rlexp.buffers.FrameObs`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from omegaconf import MISSING

from rlexp.algos.learner import OffPolicyLearner
from rlexp.algos.off_policy import OffPolicyConfig
from rlexp.envs import ActionAdapter
from rlexp.errors import check, check_at_least
from rlexp.schema import Stat

OPTIMIZERS = ("adam", "rmsprop")
LOSSES = ("huber", "mse")
DISTRIBUTIONAL = ("c51", "qr")
PER_WEIGHTS = ("buffer", "batch")  # what prioritized replay's importance weights are divided by


@dataclass
class DQNConfig(OffPolicyConfig):
    """DQN; see ``conf/algo/dqn.yaml`` for the meaning of each key and the module docstring for the
    algorithm in words. ``lr`` is its one learning rate."""

    NAME: ClassVar[str] = "dqn"
    TORCH_COMPILE: ClassVar[bool] = True
    ACTION_SPACES: ClassVar[tuple[type, ...]] = (spaces.Discrete,)
    BOUNDED_ACTIONS: ClassVar[bool] = False
    IMAGE_NETWORK: ClassVar[str] = "nature_cnn"
    # prioritized replay's beta rises to 1 over the whole run (epochs x steps_per_epoch) when
    # per_beta_steps is null (every rainbow run by default)
    RUN_SCHEDULES: ClassVar[tuple[tuple[str, Callable[[Any], bool]], ...]] = (
        ("per_beta_steps", lambda algo: algo.prioritized and algo.per_beta_steps is None),
        ("anneal_lr", lambda algo: algo.anneal_lr),
    )
    SAMPLED_ACTIONS: ClassVar[str | None] = "epsilon-greedy"  # at the epsilon the checkpoint was at

    optimizer: str = MISSING
    optim_eps: float = MISSING
    rms_alpha: float = MISSING
    loss: str = MISSING
    max_grad_norm: float | None = MISSING
    target_update_every: int = MISSING
    eps_start: float = MISSING
    eps_end: float = MISSING
    exploration_steps: int = MISSING
    double_q: bool = MISSING
    dueling: bool = MISSING
    n_step: int = MISSING
    prioritized: bool = MISSING
    per_alpha: float = MISSING
    per_beta0: float = MISSING
    per_beta_steps: int | None = MISSING
    per_eps: float = MISSING
    per_weights: str = MISSING
    distributional: str | None = MISSING
    num_atoms: int = MISSING
    v_min: float = MISSING
    v_max: float = MISSING
    num_quantiles: int = MISSING
    noisy: bool = MISSING
    noisy_sigma0: float = MISSING
    anneal_lr: bool = MISSING

    def validate(self, procs: int) -> None:
        super().validate(procs)
        check(self.lr is not None, "algo.lr is required for dqn (its one learning rate); give a value > 0")
        check(
            self.optimizer in OPTIMIZERS,
            f"algo.optimizer={self.optimizer!r} is unknown; choose one of: {', '.join(OPTIMIZERS)}",
        )
        check(self.loss in LOSSES, f"algo.loss={self.loss!r} is unknown; choose one of: {', '.join(LOSSES)}")
        check(
            math.isfinite(self.optim_eps) and self.optim_eps > 0,
            f"algo.optim_eps={self.optim_eps} is out of range; use a number > 0",
        )
        check(
            0.0 < self.rms_alpha < 1.0,
            f"algo.rms_alpha={self.rms_alpha} is out of range; use 0 < rms_alpha < 1",
        )
        check(
            self.max_grad_norm is None or (math.isfinite(self.max_grad_norm) and self.max_grad_norm > 0),
            f"algo.max_grad_norm={self.max_grad_norm} is out of range; use a number > 0 or null (no clipping)",
        )
        for key in ("eps_start", "eps_end"):
            value = getattr(self, key)
            check(0.0 <= value <= 1.0, f"algo.{key}={value} is out of range; use 0 <= {key} <= 1")
        check_at_least(self, target_update_every=1, exploration_steps=0, n_step=1)
        if self.per_beta_steps is not None:
            check_at_least(self, per_beta_steps=0)
        check(
            0.0 <= self.per_alpha <= 1.0,
            f"algo.per_alpha={self.per_alpha} is out of range; use 0 <= per_alpha <= 1",
        )
        check(
            0.0 <= self.per_beta0 <= 1.0,
            f"algo.per_beta0={self.per_beta0} is out of range; use 0 <= per_beta0 <= 1",
        )
        check(
            math.isfinite(self.per_eps) and self.per_eps > 0,
            f"algo.per_eps={self.per_eps} is out of range; use a number > 0",
        )
        check(
            self.per_weights in PER_WEIGHTS,
            f"algo.per_weights={self.per_weights!r} is unknown; choose one of: {', '.join(PER_WEIGHTS)}",
        )
        check(
            self.distributional is None or self.distributional in DISTRIBUTIONAL,
            f"algo.distributional={self.distributional!r} is unknown; choose one of: "
            f"{', '.join(DISTRIBUTIONAL)}, or null (DQN's Q-values)",
        )
        check_at_least(self, num_atoms=2, num_quantiles=1)
        check(
            math.isfinite(self.v_min) and math.isfinite(self.v_max) and self.v_min < self.v_max,
            f"algo.v_min={self.v_min} and algo.v_max={self.v_max} do not bound C51's atoms; "
            "use finite numbers with v_min < v_max",
        )
        check(
            self.distributional is None or self.loss == "huber",
            f"algo.loss={self.loss} is for Q-values (distributional=null); distributional={self.distributional} "
            "learns by its own loss (c51: cross-entropy, qr: the quantile Huber loss), so leave algo.loss=huber",
        )
        check(
            math.isfinite(self.noisy_sigma0) and self.noisy_sigma0 > 0,
            f"algo.noisy_sigma0={self.noisy_sigma0} is out of range; use a number > 0",
        )

    @property
    def atoms(self) -> int:
        """The network's outputs per action: C51's atoms, QR-DQN's quantiles, or 1 (a Q-value)."""
        if self.distributional == "c51":
            return self.num_atoms
        return self.num_quantiles if self.distributional == "qr" else 1

    def support(self) -> np.ndarray | None:
        """C51's atoms: ``num_atoms`` values evenly spaced on [v_min, v_max] (float64, the one source of
        both backends' float32 atoms and of numpy acting's); None for the other heads."""
        if self.distributional != "c51":
            return None
        return np.linspace(self.v_min, self.v_max, self.num_atoms)

    @classmethod
    def tuned_names(cls, algo: dict[str, Any]) -> tuple[str, ...]:
        """The tuned settings of every preset of DQN (``tuned=dqn``, ``qrdqn``, ``c51``, ``rainbow``) apply
        to every DQN: they set the loop, the optimizer, the network and the head's range, and the parts
        (head, noisy networks, dueling, ...) stay the algo section's. So an ablation runs at the preset's
        settings: Rainbow without noisy networks is ``algo=rainbow tuned=rainbow algo.noisy=false``
        (epsilon-greedy then explores at the section's epsilon keys)."""
        return ("dqn", "qrdqn", "c51", "rainbow")

    def sampled_actions(self) -> str | None:
        return "noisy-network (greedy under fresh noise)" if self.noisy else self.SAMPLED_ACTIONS

    def notes(self) -> list[str]:
        if self.noisy and (self.eps_start > 0 or self.eps_end > 0):
            return [
                f"algo.noisy=true explores by its noisy layers: epsilon-greedy is off (algo.eps_start="
                f"{self.eps_start}, eps_end={self.eps_end} and exploration_steps are not used)"
            ]
        if not self.noisy and self.eps_start == 0 and self.eps_end == 0:  # algo=rainbow algo.noisy=false
            return [
                "algo.noisy=false with algo.eps_start=0 and eps_end=0: nothing explores after the start_steps' "
                "random actions (epsilon-greedy, e.g. Rainbow's without noisy networks: algo.eps_start=1.0 "
                "algo.eps_end=0.01)"
            ]
        return []

    def epsilon(self, steps: int) -> float:
        """Epsilon after ``steps`` env steps of all ranks: linear from eps_start to eps_end (0 with
        noisy networks, which explore by their noise)."""
        if self.noisy:
            return 0.0
        if self.exploration_steps == 0 or steps >= self.exploration_steps:
            return self.eps_end
        return self.eps_start + (self.eps_end - self.eps_start) * steps / self.exploration_steps

    def beta(self, steps: int) -> float | None:
        """The importance-sampling exponent after ``steps`` env steps of all ranks: linear to 1 over
        ``per_beta_steps`` (None: the run's ``epochs * steps_per_epoch``); None without prioritized
        replay."""
        if not self.prioritized:
            return None
        span = self.epochs * self.steps_per_epoch if self.per_beta_steps is None else self.per_beta_steps
        if span == 0 or steps >= span:
            return 1.0
        return self.per_beta0 + (1.0 - self.per_beta0) * steps / span

    def learning_rate(self, steps: int) -> float:
        """The learning rate after ``steps`` env steps of all ranks: ``lr``, or with ``anneal_lr`` linearly
        to 0 over the run (``lr * (1 - steps / (epochs * steps_per_epoch))``, SB3's ``lin_``)."""
        assert self.lr is not None
        if not self.anneal_lr:
            return self.lr
        return self.lr * max(0.0, 1.0 - steps / (self.epochs * self.steps_per_epoch))

    def replay_options(self) -> dict[str, Any]:
        """How the loop builds this algorithm's replay (:class:`rlexp.buffers.ReplayBuffer`'s options)."""
        return {
            "n_step": self.n_step,
            "gamma": self.gamma,
            "discounts": True,
            "alpha": self.per_alpha if self.prioritized else None,
            "weights_over": self.per_weights,
        }

    def stats(self) -> tuple[Stat, ...]:
        return (("QVals", True), ("LossQ", False), ("Epsilon", False))

    @staticmethod
    def learner_class(backend: str) -> type[OffPolicyLearner]:
        """DQNLearner of rlexp/algos/dqn/torch.py or tf.py (imported here, on demand)."""
        if backend == "tf":
            from rlexp.algos.dqn.tf import DQNLearner as TFDQNLearner

            return TFDQNLearner
        from rlexp.algos.dqn.torch import DQNLearner

        return DQNLearner

    @staticmethod
    def env_action(act_space: Any) -> Callable[[Any], Any]:
        """The greedy action index as the env's int (:class:`ActionAdapter`)."""
        return ActionAdapter(act_space)
