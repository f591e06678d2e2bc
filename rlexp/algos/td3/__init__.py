"""TD3: one learner per backend."""
