"""reasoner: post-training reasoning language models with search and verifiers, in JAX/Flax."""

__version__ = "0.1.0"
