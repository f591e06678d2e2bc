"""Experience buffers in numpy, shared by every backend."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

import rlexp.comm as comm
from rlexp.nn import Sequences


def discount_cumsum(x: np.ndarray, discount: float) -> np.ndarray:
    """``y[t] = sum_k discount**k * x[t+k]`` of a 1-d array, in float64 (rllab's reversed IIR filter).

    Written as the recurrence ``y[t] = x[t] + discount * y[t+1]`` that ``scipy.signal.lfilter([1],
    [1, -discount], x[::-1])`` computes, with the same operations, so the same bits; importing
    scipy.signal for it cost every run ~0.7 s of start-up, more than this costs in a 200-epoch run
    (~0.5 us a step).
    """
    ys = itertools.accumulate(x[::-1].tolist(), lambda y, v: v + discount * y, initial=0.0)
    next(ys)  # the initial 0
    return np.fromiter(ys, np.float64, len(x))[::-1]


class GAEBuffer:
    """One epoch of on-policy experience of this rank's envs, with GAE-lambda advantages.

    Each env's steps are stored in its own column, its paths back to back; ``finish_path(last_val,
    env)`` closes that env's current path, bootstrapping with ``last_val`` = V(s_T) when the path was
    cut (time limit or end of epoch) and 0 when the episode really terminated. ``get()`` returns the
    full epoch, env after env (each env's steps in time order), with advantages normalised by their
    mean and std pooled over all ranks.

    :param obs_dim: length of the (flattened) observation vector, or the shape of one observation
        (images: :func:`rlexp.envs.obs_dtype` stores them as uint8).
    :param act_shape: shape of one action: () for Discrete, (n,) for Box.
    :param act_dtype: numpy dtype of one action.
    :param size: steps each env collects per epoch.
    :param gamma: discount factor for rewards-to-go and the TD residuals.
    :param lam: GAE lambda.
    :param obs_dtype: numpy dtype the observations are stored in.
    :param normalize_adv: normalise the epoch's advantages (pooled over ranks) in ``get()``; False
        leaves them raw (PPO normalises per minibatch, or not at all: ``algo.adv_norm``).
    :param num_envs: envs stepped together (``env.num_envs``); :meth:`store` takes one row per env.
    :param value_target: what ``ret`` (the value function's target) holds: ``rewards_to_go``, the
        discounted return from each step (Spinning Up), or ``lambda_return``, the step's GAE advantage
        plus its value at collection time (SB3 and CleanRL; computed before advantages are normalised).
    :param recurrent: for recurrent networks, (state parts per network, e.g. ``{"pi": 2, "v": 2}`` for
        LSTMs' h and c, the state's size, ``seq_len``): :meth:`store` then also takes each env's state
        before the step and whether the step starts an episode, and :meth:`get` returns the
        observations as :class:`rlexp.nn.Sequences`: each env's segment cut at episode starts and every
        ``seq_len`` steps, each piece starting from its recorded state.
    """

    def __init__(
        self,
        obs_dim: int | tuple[int, ...],
        act_shape: tuple[int, ...],
        act_dtype: Any,
        size: int,
        gamma: float,
        lam: float,
        obs_dtype: Any = np.float32,
        normalize_adv: bool = True,
        num_envs: int = 1,
        value_target: str = "rewards_to_go",
        recurrent: tuple[dict[str, int], int, int] | None = None,
    ) -> None:
        n = num_envs
        self.recurrent = recurrent
        if recurrent is not None:
            parts, width, _ = recurrent
            self.states = np.zeros((size, n, sum(parts.values()) * width), dtype=np.float32)
            self.starts = np.zeros((size, n), dtype=np.bool_)
        self.obs = np.zeros((size, n, *np.atleast_1d(obs_dim)), dtype=obs_dtype)
        self.act = np.zeros((size, n, *act_shape), dtype=act_dtype)
        self.rew = np.zeros((size, n), dtype=np.float32)
        self.val = np.zeros((size, n), dtype=np.float32)
        self.logp = np.zeros((size, n), dtype=np.float32)
        self.adv = np.zeros((size, n), dtype=np.float32)
        self.ret = np.zeros((size, n), dtype=np.float32)
        self.gamma, self.lam, self.normalize_adv = gamma, lam, normalize_adv
        self.lambda_return = value_target == "lambda_return"
        self.ptr, self.size, self.num_envs = 0, size, n
        self.path_start = np.zeros(n, np.int64)

    def store(
        self, obs: np.ndarray, act: Any, rew: Any, val: Any, logp: Any, states: Any = None, starts: Any = None
    ) -> None:
        """Append one step of every env (one row per env; with one env, that env's values alone);
        recurrent networks: also each env's state before the step and whether the step starts an episode."""
        assert self.ptr < self.size, "GAEBuffer is full"
        i = self.ptr
        self.obs[i], self.act[i], self.rew[i], self.val[i], self.logp[i] = obs, act, rew, val, logp
        if self.recurrent is not None:
            self.states[i], self.starts[i] = states, starts
        self.ptr += 1

    def finish_path(self, last_val: float = 0.0, env: int = 0) -> None:
        """Compute advantages and value targets of ``env``'s path since its last call."""
        path = slice(int(self.path_start[env]), self.ptr)
        rews = np.append(self.rew[path, env], last_val)
        vals = np.append(self.val[path, env], last_val)
        deltas = rews[:-1] + self.gamma * vals[1:] - vals[:-1]
        self.adv[path, env] = discount_cumsum(deltas, self.gamma * self.lam)
        if self.lambda_return:
            self.ret[path, env] = self.adv[path, env] + self.val[path, env]
        else:
            self.ret[path, env] = discount_cumsum(rews, self.gamma)[:-1]
        self.path_start[env] = self.ptr

    def sequences(self) -> Sequences:
        """The epoch's observations as training sequences for recurrent networks
        (:class:`rlexp.nn.Sequences`): each env's steps cut where an episode starts and every
        ``seq_len`` steps, each piece with the state recorded before its first step, env after env."""
        return _gae_sequences(self)

    def get(self) -> dict[str, np.ndarray]:
        """The full epoch (obs, act, ret, adv, logp, val), env after env, advantages normalised unless
        ``normalize_adv`` is off; empties the buffer."""
        assert self.ptr == self.size, "GAEBuffer.get() before the epoch was full"
        assert (self.path_start == self.ptr).all(), "GAEBuffer.get() with an unfinished path"
        self.ptr = 0
        self.path_start[:] = 0

        def flat(x: np.ndarray) -> np.ndarray:  # (steps, envs, ...) -> (envs x steps, ...), env-major
            return np.ascontiguousarray(x.swapaxes(0, 1)).reshape(-1, *x.shape[2:])

        adv = flat(self.adv)
        if self.normalize_adv:
            mean, std = comm.statistics_scalar(adv)
            adv = (adv - mean) / (std + 1e-8)
        return dict(
            obs=self.sequences() if self.recurrent is not None else flat(self.obs),
            act=flat(self.act),
            ret=flat(self.ret),
            adv=adv.astype(np.float32),
            logp=flat(self.logp),
            val=flat(self.val),
        )


def _gae_sequences(buf: GAEBuffer) -> Sequences:
    """:meth:`GAEBuffer.sequences`: each env's column cut at episode starts and every seq_len steps."""
    assert buf.recurrent is not None
    parts, width, seq_len = buf.recurrent
    pieces = []  # (env, first step, end step), env-major in time: the order of the flattened arrays
    for env in range(buf.num_envs):
        first = 0
        for t in range(1, buf.size + 1):
            if t == buf.size or buf.starts[t, env] or t - first == seq_len:
                pieces.append((env, first, t))
                first = t
    length = max(t1 - t0 for _, t0, t1 in pieces)
    obs = np.zeros((len(pieces), length, *buf.obs.shape[2:]), buf.obs.dtype)
    valid = np.zeros((len(pieces), length), np.bool_)
    for k, (env, t0, t1) in enumerate(pieces):
        obs[k, : t1 - t0], valid[k, : t1 - t0] = buf.obs[t0:t1, env], True
    first_states = np.stack([buf.states[t0, env] for env, t0, _ in pieces])
    states, at = {}, 0
    for key, n in parts.items():
        states[key] = tuple(first_states[:, at + i * width : at + (i + 1) * width] for i in range(n))
        at += n * width
    return Sequences(obs, valid, states)


def transition_bytes(
    obs_shape: tuple[int, ...], obs_dtype: Any, act_shape: tuple[int, ...], act_dtype: Any, *,
    frames: bool = False, discounts: bool = False, alpha: float | None = None, **_: Any,
) -> int:  # fmt: skip
    """Memory of one transition of a :class:`ReplayBuffer` with these shapes and options (what it
    allocates per slot of ``size``; frame stacks: the frame ring's share, see :class:`FrameObs`)."""
    itemsize = np.dtype(obs_dtype).itemsize
    if frames:
        k = obs_shape[0]
        frame = int(np.prod(obs_shape[1:])) * itemsize
        obs = frame * 5 // 4 + 2 * k * 8 + 8  # a quarter more frames than transitions; refs; oldest
    else:
        obs = 2 * int(np.prod(obs_shape)) * itemsize
    act = int(np.prod(act_shape)) * np.dtype(act_dtype).itemsize
    return obs + act + 8 + (4 if discounts else 0) + (32 if alpha is not None else 0)


class SumTree:
    """Proportional prioritized sampling (Schaul et al. 2016): a binary tree of sums (and of minima) over
    ``capacity`` leaves, one priority per replay slot.

    Each inner node is recomputed from its two children after every change (never updated by adding
    deltas), so the tree is a function of its leaves alone: rebuilt from saved leaves it holds the
    same sums bit for bit (exact resume).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.base = 1 << max(0, (capacity - 1).bit_length())  # leaves at base .. base + capacity - 1
        self.sums = np.zeros(2 * self.base, np.float64)
        self.mins = np.full(2 * self.base, np.inf, np.float64)

    @property
    def total(self) -> float:
        return float(self.sums[1])

    @property
    def min(self) -> float:
        """The smallest priority of a filled slot (inf when none is)."""
        return float(self.mins[1])

    def leaves(self) -> np.ndarray:
        return self.sums[self.base : self.base + self.capacity]

    def set(self, slots: np.ndarray, values: np.ndarray) -> None:
        """Set the priorities of ``slots`` (with duplicates, the last value counts) and their ancestors."""
        if len(slots) == 1:  # a stored transition: one path, faster as scalars than as arrays
            self._set_one(int(slots[0]), float(values[0]))
            return
        nodes = np.asarray(slots, np.int64) + self.base
        values = np.asarray(values, np.float64)
        self.sums[nodes] = values
        self.mins[nodes] = np.where(values > 0, values, np.inf)  # an empty (or invalid) slot: no minimum
        nodes = nodes // 2
        while nodes[0] >= 1:  # all at one depth; a node listed twice gets the same value twice
            left = 2 * nodes
            self.sums[nodes] = self.sums[left] + self.sums[left + 1]
            self.mins[nodes] = np.minimum(self.mins[left], self.mins[left + 1])
            nodes //= 2

    def _set_one(self, slot: int, value: float) -> None:
        """:meth:`set` for one slot, with the same sums and minima (the same float64 operations)."""
        sums, mins = self.sums, self.mins
        node = slot + self.base
        sums[node], mins[node] = value, value if value > 0 else np.inf
        node //= 2
        while node >= 1:
            left = 2 * node
            sums[node] = sums[left] + sums[left + 1]
            mins[node] = min(mins[left], mins[left + 1])
            node //= 2

    def find(self, mass: np.ndarray) -> np.ndarray:
        """The slot in which each cumulative ``mass`` (in [0, total)) falls."""
        mass = np.minimum(np.asarray(mass, np.float64), np.nextafter(self.total, 0))
        nodes = np.ones(len(mass), np.int64)
        while nodes[0] < self.base:
            left = self.sums[2 * nodes]
            right = mass >= left
            mass = np.where(right, mass - left, mass)
            nodes = 2 * nodes + right
        return nodes - self.base

    def load(self, leaves: np.ndarray) -> None:
        """Rebuild the tree from saved leaf priorities."""
        self.sums[:] = 0.0
        self.mins[:] = np.inf
        if len(leaves):
            self.set(np.arange(len(leaves)), leaves)


class ArrayObs:
    """Observations of a replay buffer stored as they are: obs and obs2 of every transition."""

    def __init__(self, obs_shape: tuple[int, ...], size: int, dtype: Any) -> None:
        self.obs = np.zeros((size, *obs_shape), dtype=dtype)
        self.obs2 = np.zeros((size, *obs_shape), dtype=dtype)

    def prepare(self, env: int, obs: np.ndarray) -> np.ndarray:
        """What :meth:`put` takes for one observation of ``env`` (here: the observation itself)."""
        return obs

    def put(self, slot: int, obs: np.ndarray, obs2: np.ndarray) -> None:
        self.obs[slot], self.obs2[slot] = obs, obs2

    def get(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.obs[idx], self.obs2[idx]

    def valid(self, idx: np.ndarray) -> np.ndarray | None:
        """Which of ``idx`` can be sampled (None: all)."""
        return None

    def bytes_per_transition(self) -> int:
        return 2 * self.obs[0].nbytes

    def handles(self, items: list[np.ndarray]) -> np.ndarray:
        """Prepared observations of an n-step queue as one array (for checkpoints)."""
        return np.asarray(items, dtype=self.obs.dtype).reshape(-1, *self.obs.shape[1:])

    def state_dict(self, size: int) -> dict[str, Any]:
        return {"obs": self.obs[:size], "obs2": self.obs2[:size]}

    def load_state_dict(self, state: dict[str, Any], size: int) -> None:
        self.obs[:size], self.obs2[:size] = np.asarray(state["obs"]), np.asarray(state["obs2"])


class FrameObs:
    """Observations of a replay buffer that are stacks of frames (``(k, ...)``, the stack first, as
    gymnasium's FrameStackObservation gives them) with every frame stored once.

    Consecutive observations of an env share k - 1 frames: one whose first k - 1 frames are the
    previous observation's last k - 1 is stored as its newest frame only, and every observation (and
    obs2) is a row of k indices into one ring of frames. A new episode's first observation, or any
    observation that does not continue its env's last one, stores all of its frames. An Atari replay
    of 1M transitions of 4 x 84 x 84 then holds about 1.25M frames of 84 x 84 (8.8 GB) instead of 2M
    stacks (56 GB), and its observations are exactly what the env gave.

    The frame ring holds a quarter more frames than transitions; where episodes are so short that
    frames are written faster, the oldest transitions lose frames before they leave the buffer:
    :meth:`valid` tells (each transition keeps the write count of its oldest frame), and sampling
    skips them.
    """

    def __init__(self, obs_shape: tuple[int, ...], size: int, dtype: Any, num_envs: int) -> None:
        self.k = obs_shape[0]
        self.capacity = size + size // 4 + 4 * self.k * num_envs
        self.frames = np.zeros((self.capacity, *obs_shape[1:]), dtype=dtype)
        self.written = 0  # frames written so far (the ring position is written % capacity)
        self.refs = np.zeros((size, self.k), np.int64)  # the frame counts of each obs ...
        self.refs2 = np.zeros((size, self.k), np.int64)  # ... and of each obs2
        self.oldest = np.zeros(size, np.int64)
        # each env's last prepared observation (a copy) and its frame counts: the next one may continue it
        self.last: list[tuple[np.ndarray, np.ndarray] | None] = [None] * num_envs

    def _write(self, frames: np.ndarray) -> np.ndarray:
        n = len(frames)
        counts = np.arange(self.written, self.written + n)
        self.frames[counts % self.capacity] = frames
        self.written += n
        return counts

    def prepare(self, env: int, obs: np.ndarray) -> np.ndarray:
        """The frame counts of one observation of ``env``, writing the frames not stored yet."""
        last = self.last[env]
        if last is not None and np.array_equal(obs, last[0]):
            return last[1]  # this env's last observation again (the obs after the obs2 of a step)
        if last is not None and np.array_equal(obs[:-1], last[0][1:]):
            refs = np.append(last[1][1:], self._write(obs[-1:]))
        else:
            refs = self._write(obs)
        self.last[env] = (np.array(obs), refs)
        return refs

    def put(self, slot: int, refs: np.ndarray, refs2: np.ndarray) -> None:
        self.refs[slot], self.refs2[slot] = refs, refs2
        self.oldest[slot] = min(refs.min(), refs2.min())

    def get(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.frames[self.refs[idx] % self.capacity], self.frames[self.refs2[idx] % self.capacity]

    def valid(self, idx: np.ndarray) -> np.ndarray:
        return self.oldest[idx] >= self.written - self.capacity

    def bytes_per_transition(self) -> int:
        frame = self.frames[0].nbytes
        return (self.capacity * frame) // len(self.refs) + 2 * self.refs[0].nbytes + 8

    def handles(self, items: list[np.ndarray]) -> np.ndarray:
        return np.asarray(items, np.int64).reshape(-1, self.k)

    def state_dict(self, size: int) -> dict[str, Any]:
        held = min(self.written, self.capacity)
        last = [(o, r) for o, r in (x for x in self.last if x is not None)]
        return {
            "frames": self.frames[:held],
            "written": self.written,
            "refs": self.refs[:size],
            "refs2": self.refs2[:size],
            "oldest": self.oldest[:size],
            "last_env": np.array([i for i, x in enumerate(self.last) if x is not None], np.int64),
            "last_obs": np.asarray([o for o, _ in last], self.frames.dtype).reshape(
                -1, self.k, *self.frames.shape[1:]
            ),
            "last_refs": np.asarray([r for _, r in last], np.int64).reshape(-1, self.k),
        }

    def load_state_dict(self, state: dict[str, Any], size: int) -> None:
        frames = np.asarray(state["frames"])
        self.frames[: len(frames)] = frames
        self.written = int(state["written"])
        for key in ("refs", "refs2", "oldest"):
            getattr(self, key)[:size] = np.asarray(state[key])
        self.last = [None] * len(self.last)
        for env, obs, refs in zip(state["last_env"], state["last_obs"], state["last_refs"], strict=True):
            self.last[int(env)] = (np.array(obs), np.asarray(refs, np.int64))


class ReplayBuffer:
    """FIFO ring of transitions (obs, act, rew, obs2, done) in numpy arrays (float32; image observations
    in uint8, in their shape: a quarter of the memory), with the DQN family's extensions as options.

    ``done`` is 1 only when the episode terminated; a time-limit truncation is stored as 0 so the
    target still bootstraps from obs2.

    Options (each off by default, and then costing nothing):

    - ``n_step`` > 1: each env's last n steps wait in a queue; a transition leaves it as (obs_t, act_t,
      sum_{i<k} gamma^i r_{t+i}, obs_{t+k}, done, discount = gamma^k) with k = n, or fewer when the
      episode ended first (terminated: done = 1; truncated: bootstrapped from the last observation).
      With ``discounts`` every transition carries its ``discount`` (gamma^k; gamma for n = 1), which
      the DQN learner bootstraps with.
    - ``frames``: observations that are frame stacks are stored a frame at a time (:class:`FrameObs`).
    - ``alpha``: proportional prioritized replay (Schaul et al. 2016) with priorities ``p^alpha`` in a
      :class:`SumTree`; new transitions get the largest priority so far; :meth:`sample_batch` with
      ``beta`` adds importance weights and the ``indices`` to pass to :meth:`update_priorities`. The
      weights ``(N P(i))^-beta`` are divided by the largest any stored transition could get
      (``weights_over="buffer"``, OpenAI baselines') or by the largest in the minibatch (``"batch"``,
      Dopamine's and CleanRL's): over the buffer, one well-learnt transition anywhere shrinks them all.

    :param obs_dim: observation length, or the shape of one observation (images).
    :param act_dim: action length (float32 actions), or an action shape with ``act_dtype``.
    :param size: capacity in transitions (of this rank).
    :param obs_dtype: numpy dtype the observations are stored in (:func:`rlexp.envs.obs_dtype`).
    :param num_envs: envs whose steps :meth:`add` takes together (one n-step queue each).
    """

    KEYS = ("obs", "obs2", "act", "rew", "done")

    def __init__(
        self,
        obs_dim: int | tuple[int, ...],
        act_dim: int | tuple[int, ...],
        size: int,
        obs_dtype: Any = np.float32,
        *,
        act_dtype: Any = np.float32,
        num_envs: int = 1,
        n_step: int = 1,
        gamma: float = 1.0,
        discounts: bool = False,
        frames: bool = False,
        alpha: float | None = None,
        weights_over: str = "buffer",
    ) -> None:
        obs_shape = tuple(int(n) for n in np.atleast_1d(obs_dim))
        act_shape = (act_dim,) if isinstance(act_dim, int) else tuple(act_dim)
        self.store_obs: ArrayObs | FrameObs = (
            FrameObs(obs_shape, size, obs_dtype, num_envs) if frames else ArrayObs(obs_shape, size, obs_dtype)
        )
        self.act = np.zeros((size, *act_shape), dtype=act_dtype)
        self.rew = np.zeros(size, dtype=np.float32)
        self.done = np.zeros(size, dtype=np.float32)
        self.discount = np.zeros(size, dtype=np.float32) if discounts else None
        self.ptr, self.size, self.max_size = 0, 0, size
        self.n_step, self.gamma = n_step, gamma
        self.queues: list[list[tuple[Any, Any, float]]] = [[] for _ in range(num_envs)]
        self.alpha, self.weights_over = alpha, weights_over
        self.tree = SumTree(size) if alpha is not None else None
        self.max_priority = 1.0  # the largest priority so far (before ** alpha): new transitions get it

    @property
    def held_back(self) -> int:
        """The most steps the n-step queues can hold back: ``n_step - 1`` of each env (0 for one-step
        returns). After each env's k-th step the buffer holds at least ``num_envs * (k - n_step + 1)``
        transitions (or its capacity), whatever the episodes did."""
        return len(self.queues) * (self.n_step - 1)

    @property
    def obs(self) -> np.ndarray:
        return self.store_obs.obs  # type: ignore[union-attr]

    @property
    def obs2(self) -> np.ndarray:
        return self.store_obs.obs2  # type: ignore[union-attr]

    def bytes_per_transition(self) -> int:
        """Memory of one transition (observations, action, reward, flags, priority)."""
        extra = 4 if self.discount is not None else 0
        extra += 24 if self.tree is not None else 0
        return self.store_obs.bytes_per_transition() + self.act[0].nbytes + 8 + extra

    def store(self, obs: np.ndarray, act: Any, rew: float, obs2: np.ndarray, done: bool) -> None:
        """One transition as it is (no n-step queue)."""
        self._put(obs, act, rew, obs2, done, self.gamma)

    def _put(self, obs: Any, act: Any, rew: float, obs2: Any, done: bool, discount: float) -> None:
        i = self.ptr
        self.store_obs.put(i, obs, obs2)
        self.act[i], self.rew[i], self.done[i] = act, rew, done
        if self.discount is not None:
            self.discount[i] = discount
        if self.tree is not None:
            self.tree.set(np.array([i]), np.array([self.max_priority**self.alpha]))
        self.ptr = (self.ptr + 1) % self.max_size
        self.size = min(self.size + 1, self.max_size)

    def add(
        self, obs: np.ndarray, act: np.ndarray, rew: np.ndarray, obs2: np.ndarray, terminated: np.ndarray,
        truncated: np.ndarray,
    ) -> None:  # fmt: skip
        """One step of every env (one row each): the transitions it completes enter the buffer."""
        store = self.store_obs
        for i in range(len(self.queues)):
            o, o2 = store.prepare(i, obs[i]), store.prepare(i, obs2[i])
            if self.n_step == 1:
                self._put(o, act[i], rew[i], o2, terminated[i], self.gamma)
                continue
            queue = self.queues[i]  # copies: the caller may reuse its arrays
            queue.append((np.array(o), np.array(act[i]), float(rew[i])))
            if terminated[i] or truncated[i]:
                while queue:
                    self._emit(queue, o2, bool(terminated[i]))
            elif len(queue) == self.n_step:
                self._emit(queue, o2, False)

    def _emit(self, queue: list[tuple[Any, Any, float]], obs2: Any, done: bool) -> None:
        """The queue's first step as an n-step transition to ``obs2``, which the queue's steps lead to."""
        ret, discount = 0.0, 1.0
        for _, _, r in queue:
            ret += discount * r
            discount *= self.gamma
        o, a, _ = queue.pop(0)
        self._put(o, a, ret, obs2, done, discount)

    def _sample_slots(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        idx = rng.integers(0, self.size, size=batch_size)
        while True:  # transitions whose frames are gone (FrameObs) are drawn again
            valid = self.store_obs.valid(idx)
            if valid is None or valid.all():
                return idx
            bad = ~valid
            idx[bad] = rng.integers(0, self.size, size=int(bad.sum()))

    def sample_batch(
        self, batch_size: int, rng: np.random.Generator, beta: float | None = None
    ) -> dict[str, np.ndarray]:
        """``batch_size`` transitions drawn uniformly with replacement; with prioritized replay, in
        proportion to their priorities (stratified: one from each of ``batch_size`` equal parts of the
        total), with their importance weights for ``beta`` and their ``indices``."""
        if self.tree is None:
            idx = self._sample_slots(batch_size, rng)
            out = {}
        else:
            idx = self._sample_prioritized(batch_size, rng)
            assert beta is not None, "prioritized replay needs beta"
            tree, n = self.tree, self.size
            probs = tree.sums[tree.base + idx] / tree.total
            weights = (n * probs) ** -beta
            if self.weights_over == "batch":  # over the largest in the minibatch (Dopamine's, CleanRL's)
                weights /= weights.max()
            else:  # over the largest any stored transition could get (OpenAI baselines')
                weights /= (n * tree.min / tree.total) ** -beta
            out = {"weights": weights.astype(np.float32), "indices": idx}
        obs, obs2 = self.store_obs.get(idx)
        out.update(obs=obs, obs2=obs2, act=self.act[idx], rew=self.rew[idx], done=self.done[idx])
        if self.discount is not None:
            out["discount"] = self.discount[idx]
        return out

    def _sample_prioritized(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        tree = self.tree
        assert tree is not None
        while True:
            bounds = (np.arange(batch_size) + rng.random(batch_size)) * (tree.total / batch_size)
            idx = tree.find(bounds)
            valid = self.store_obs.valid(idx)
            if valid is None or valid.all():
                return idx
            tree.set(idx[~valid], np.zeros(int((~valid).sum())))  # frames gone: never drawn again

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Set the priorities (e.g. |TD error| + eps) of sampled transitions."""
        assert self.tree is not None and self.alpha is not None
        priorities = np.asarray(priorities, np.float64)
        self.max_priority = max(self.max_priority, float(priorities.max()))
        self.tree.set(indices, priorities**self.alpha)

    def state_dict(self) -> dict[str, Any]:
        """The filled part, the write position, the n-step queues and the priorities (for checkpoints)."""
        n = self.size
        state: dict[str, Any] = {
            "ptr": self.ptr,
            "size": n,
            **self.store_obs.state_dict(n),
            **{k: getattr(self, k)[:n] for k in ("act", "rew", "done")},
        }
        if self.discount is not None:
            state["discount"] = self.discount[:n]
        if self.n_step > 1:
            state["queue_len"] = np.array([len(q) for q in self.queues], np.int64)
            items = [item for q in self.queues for item in q]
            state["queue_obs"] = self.store_obs.handles([o for o, _, _ in items])
            state["queue_act"] = np.asarray([a for _, a, _ in items], self.act.dtype).reshape(
                -1, *self.act.shape[1:]
            )
            state["queue_rew"] = np.asarray([r for _, _, r in items], np.float64)
        if self.tree is not None:
            state["priorities"] = self.tree.leaves()[:n]
            state["max_priority"] = self.max_priority
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = int(state["size"])
        if n > self.max_size:
            raise ValueError(
                f"checkpoint replay buffer holds {n} transitions, more than its capacity {self.max_size}"
            )
        self.store_obs.load_state_dict(state, n)
        for k in ("act", "rew", "done"):
            getattr(self, k)[:n] = np.asarray(state[k])
        if self.discount is not None:
            self.discount[:n] = np.asarray(state["discount"])
        self.ptr, self.size = int(state["ptr"]), n
        if self.n_step > 1:
            lengths = np.asarray(state["queue_len"], np.int64)
            if len(lengths) != len(self.queues):
                raise ValueError(
                    f"the checkpoint's replay has {len(lengths)} n-step queues, this run {len(self.queues)} envs"
                )
            obs, acts, rews = (np.asarray(state[k]) for k in ("queue_obs", "queue_act", "queue_rew"))
            start = 0
            for queue, length in zip(self.queues, lengths, strict=True):
                queue[:] = [(obs[j], acts[j], float(rews[j])) for j in range(start, start + int(length))]
                start += int(length)
        if self.tree is not None:
            self.tree.load(np.asarray(state["priorities"], np.float64))
            self.max_priority = float(state["max_priority"])
