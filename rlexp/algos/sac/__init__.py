"""SAC: one learner per backend."""
