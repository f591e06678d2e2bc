"""PPO-clip: one learner per backend."""
