"""Network building blocks, one module per backend."""
