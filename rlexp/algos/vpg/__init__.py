"""VPG: one learner per backend."""
