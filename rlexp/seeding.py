"""The random streams of a run: one independent stream per purpose and per MPI rank.

Every source of randomness in training draws from its own stream, derived from the run's ``seed``
by numpy's :class:`~numpy.random.SeedSequence` with the spawn key ``(rank, stream)``. Streams of
different purposes or ranks are statistically independent (a shared seed would make, say, the
replay indices and the exploration noise the same sequence of numbers), and adding a stream later
leaves the others unchanged. Each stream is handed to its consumer as one integer seed, recorded in
provenance.json:

- ``env``: the training env's resets (its first reset is seeded; later resets continue its stream);
  with ``env.num_envs`` > 1, env ``i`` takes copy ``i`` of this stream and of ``action_space``
  (:meth:`RankSeeds.indexed`; copy 0 is the stream itself);
- ``action_space``: the env's action-space sampler (the off-policy loop's random warm-up actions);
- ``test_env``: the test env of evaluation (:mod:`rlexp.algos.evaluation`, both loops);
- ``init``: the networks' initial weights (then copied from rank 0, so only rank 0's count);
- ``acting``: the policy's randomness while acting (on-policy action sampling, off-policy exploration
  noise), a numpy Generator held by the learner;
- ``replay``: the off-policy loop's minibatch indices;
- ``learner``: randomness inside an update (TD3's target policy smoothing, SAC's reparameterised
  samples), a torch.Generator or tf.random.Generator held by the learner.
"""

from __future__ import annotations

import numpy as np

# Stream names and their fixed places in the spawn key: never reorder, only append.
STREAMS = ("env", "action_space", "test_env", "init", "acting", "replay", "learner", "video")


class RankSeeds:
    """The integer seed of each stream of one rank.

    :param seed: the run's ``seed`` (any integer >= 0).
    :param rank: the MPI rank (0 without MPI).
    """

    def __init__(self, seed: int, rank: int = 0) -> None:
        self.seed, self.rank = int(seed), int(rank)

    def __getitem__(self, stream: str) -> int:
        """The seed of ``stream`` (one of :data:`STREAMS`): 63 bits, so that every library takes it."""
        sequence = np.random.SeedSequence(self.seed, spawn_key=(self.rank, STREAMS.index(stream)))
        return int(sequence.generate_state(1, np.uint64)[0] >> np.uint64(1))

    def indexed(self, stream: str, index: int) -> int:
        """The seed of copy ``index`` of ``stream`` (the envs of a vector env: ``env.num_envs``).

        Copy 0 is ``self[stream]`` itself, so a run with one env draws what it always did; copy
        ``index`` > 0 extends the spawn key with ``index``: independent of every other stream and copy.
        """
        if index == 0:
            return self[stream]
        key = (self.rank, STREAMS.index(stream), int(index))
        sequence = np.random.SeedSequence(self.seed, spawn_key=key)
        return int(sequence.generate_state(1, np.uint64)[0] >> np.uint64(1))

    def generator(self, stream: str) -> np.random.Generator:
        """A numpy Generator on ``stream``."""
        return np.random.default_rng(self[stream])

    def as_dict(self) -> dict[str, int]:
        """Every stream's seed, by name (what provenance.json records for each rank)."""
        return {name: self[name] for name in STREAMS}
