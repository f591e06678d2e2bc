"""DDPG: one learner per backend."""
