"""TRPO: one learner per backend."""
