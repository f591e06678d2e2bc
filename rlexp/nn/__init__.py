"""Networks: one module per backend (torch.py, tf.py) naming the same things the same way, and
acting in numpy on a copy of their weights (acting.py)."""

# The hidden-layer activations every backend implements (config check: network.activation). Each of
# nn/torch.py, nn/tf.py and nn/acting.py maps these names to its own functions; a test checks that
# all three implement exactly these and compute the same values.
ACTIVATIONS = ("tanh", "relu", "elu", "leaky_relu", "gelu", "silu", "sigmoid", "identity")

# SAC's clamp of the policy's log sigma (Spinning Up's bounds), on every backend.
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
