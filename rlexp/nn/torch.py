"""PyTorch networks of the algorithms: MLPs, the on-policy actor-critic, the off-policy actors and Q.

rlexp/nn/tf.py builds the same modules, with the same names and parameter order, in TensorFlow.
Attribute names here are part of the checkpoints (they are the state_dict keys).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.distributions import Categorical, Distribution, Normal

from rlexp.nn import LOG_STD_MAX, LOG_STD_MIN
from rlexp.nn.acting import Layers

_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))

# torch's versions of rlexp.nn.ACTIVATIONS
ACTIVATIONS: dict[str, type[nn.Module]] = {
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "leaky_relu": nn.LeakyReLU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "sigmoid": nn.Sigmoid,
    "identity": nn.Identity,
}


def mlp(sizes: Sequence[int], activation: str, output_activation: str = "identity") -> nn.Sequential:
    """Linear layers of ``sizes`` (input first), ``activation`` between them, ``output_activation`` last.

    ReLU and tanh run in place on their Linear's output (which nothing else keeps; their backward
    needs only the result): the same values and gradients, without writing a fresh batch x width
    tensor per layer.
    """
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers += [
            nn.Linear(sizes[i], sizes[i + 1]),
            _activation(activation if i < len(sizes) - 2 else output_activation),
        ]
    return nn.Sequential(*layers)


def linear_layers(seq: nn.Sequential) -> Layers:
    """The (weight, bias) of each Linear in ``seq`` as numpy arrays on the host, for acting in numpy
    (:mod:`rlexp.nn.acting`; views on CPU: the copy there is taken from them)."""
    return [
        (m.weight.detach().cpu().numpy(), m.bias.detach().cpu().numpy())
        for m in seq
        if isinstance(m, nn.Linear)
    ]


class TanhInPlace(nn.Module):
    """``tanh`` overwriting its input: the values and gradients of nn.Tanh (whose backward uses only
    the result), for use right after a Linear."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.tanh_()


def _activation(name: str) -> nn.Module:
    """A fresh activation module; ReLU and tanh in place (safe right after a Linear: their backward
    needs only the result)."""
    if name == "relu":
        return nn.ReLU(inplace=True)
    return TanhInPlace() if name == "tanh" else ACTIVATIONS[name]()


def gaussian_log_prob(x: torch.Tensor, mu: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """``Normal(mu, std).log_prob(x)`` written out exactly as torch.distributions computes it (the
    same values), without building a Distribution object."""
    return -((x - mu) ** 2) / (2 * std**2) - std.log() - _LOG_SQRT_2PI


class CategoricalActor(nn.Module):
    """Policy over a Discrete action space: logits from an MLP."""

    def __init__(self, obs_dim: int, n_actions: int, hidden_sizes: Sequence[int], activation: str) -> None:
        super().__init__()
        self.logits_net = mlp([obs_dim, *hidden_sizes, n_actions], activation)

    def distribution(self, obs: torch.Tensor) -> Distribution:
        return Categorical(logits=self.logits_net(obs))

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> tuple[Distribution, torch.Tensor]:
        """pi and log pi(act|obs)."""
        pi = self.distribution(obs)
        return pi, pi.log_prob(act)


class GaussianActor(nn.Module):
    """Diagonal Gaussian policy over a Box: mean from an MLP, state-independent log std (initially
    ``log_std_init``; Spinning Up's -0.5)."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        log_std_init: float = -0.5,
    ) -> None:
        super().__init__()
        self.log_std = nn.Parameter(torch.full((act_dim,), float(log_std_init)))
        self.mu_net = mlp([obs_dim, *hidden_sizes, act_dim], activation)

    def distribution(self, obs: torch.Tensor) -> Distribution:
        return Normal(self.mu_net(obs), torch.exp(self.log_std))

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> tuple[Distribution, torch.Tensor]:
        """pi and log pi(act|obs). The log-density is computed from the (act_dim,) std, not from the
        Normal's copy of it broadcast to the batch (the same values, without a batch-sized log)."""
        mu, std = self.mu_net(obs), torch.exp(self.log_std)
        return Normal(mu, std), gaussian_log_prob(act, mu, std).sum(axis=-1)


class ValueFunction(nn.Module):
    """The state-value function V(s) of the on-policy algorithms (Spinning Up's MLPCritic)."""

    def __init__(self, obs_dim: int, hidden_sizes: Sequence[int], activation: str) -> None:
        super().__init__()
        self.v_net = mlp([obs_dim, *hidden_sizes, 1], activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v_net(obs).squeeze(-1)


class ActorCritic(nn.Module):
    """Spinning Up's MLPActorCritic: ``pi`` (categorical or Gaussian by action space) and ``v``."""

    def __init__(
        self,
        obs_dim: int,
        act_space: spaces.Space,
        hidden_sizes: Sequence[int],
        activation: str,
        log_std_init: float = -0.5,
        ortho_init: bool = False,
    ) -> None:
        super().__init__()
        if isinstance(act_space, spaces.Discrete):
            self.pi: CategoricalActor | GaussianActor = CategoricalActor(
                obs_dim, int(act_space.n), hidden_sizes, activation
            )
        else:
            self.pi = GaussianActor(
                obs_dim, int(np.prod(act_space.shape)), hidden_sizes, activation, log_std_init
            )
        self.v = ValueFunction(obs_dim, hidden_sizes, activation)
        if ortho_init:
            head = self.pi.mu_net if isinstance(self.pi, GaussianActor) else self.pi.logits_net
            orthogonal_init_(head, ORTHO_GAINS["pi"])
            orthogonal_init_(self.v.v_net, ORTHO_GAINS["v"])


# Gains of the orthogonal initialisation (SB3's ortho_init, CleanRL's layer_init): hidden layers
# sqrt(2), the policy's output layer 0.01, the value's output layer 1.
ORTHO_GAINS = {"hidden": math.sqrt(2.0), "pi": 0.01, "v": 1.0}


@torch.no_grad()
def orthogonal_init_(seq: nn.Sequential, output_gain: float) -> None:
    """Orthogonal weights (gain ``ORTHO_GAINS['hidden']``, ``output_gain`` for the last layer) and
    zero biases for every Linear of ``seq``, in place, from torch's global generator."""
    layers = [m for m in seq if isinstance(m, nn.Linear)]
    for i, layer in enumerate(layers):
        nn.init.orthogonal_(layer.weight, ORTHO_GAINS["hidden"] if i < len(layers) - 1 else output_gain)
        layer.bias.zero_()


# --- off-policy (DDPG, TD3, SAC). Actions are normalised to [-1, 1]; the loop maps them to the env's bounds.


class DeterministicActor(nn.Module):
    """mu(s) in [-1, 1]^n: an MLP with a tanh output (DDPG, TD3)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: Sequence[int], activation: str) -> None:
        super().__init__()
        self.pi = mlp([obs_dim, *hidden_sizes, act_dim], activation, "tanh")

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.pi(obs)


class QFunction(nn.Module):
    """Q(s, a) from an MLP over the concatenated observation and action."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: Sequence[int], activation: str) -> None:
        super().__init__()
        self.q = mlp([obs_dim + act_dim, *hidden_sizes, 1], activation)

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return self.q(torch.cat([obs, act], dim=-1)).squeeze(-1)


class SquashedGaussianActor(nn.Module):
    """SAC's policy: u ~ N(mu(s), sigma(s)), a = tanh(u), with the tanh log-prob correction.

    log sigma is clamped to [LOG_STD_MIN, LOG_STD_MAX] (Spinning Up's -20, 2).
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: Sequence[int], activation: str) -> None:
        super().__init__()
        self.net = mlp([obs_dim, *hidden_sizes], activation, activation)
        features = hidden_sizes[-1] if hidden_sizes else obs_dim  # no hidden layer: a linear policy
        self.mu_layer = nn.Linear(features, act_dim)
        self.log_std_layer = nn.Linear(features, act_dim)

    def forward(
        self,
        obs: torch.Tensor,
        deterministic: bool = False,
        with_logprob: bool = True,
        noise: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(action in [-1, 1], log pi(action | obs) or None). ``noise``: the standard normal draw to use."""
        h = self.net(obs)
        mu = self.mu_layer(h)
        std = torch.exp(torch.clamp(self.log_std_layer(h), LOG_STD_MIN, LOG_STD_MAX))
        if deterministic:
            u = mu
        else:
            u = mu + std * (torch.randn_like(mu) if noise is None else noise)
        logp = None
        if with_logprob:
            logp = gaussian_log_prob(u, mu, std).sum(-1)
            logp = logp - (2 * (np.log(2) - u - nn.functional.softplus(-2 * u))).sum(-1)
        return torch.tanh(u), logp
