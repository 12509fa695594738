"""hyperx: JAX-native exploration under uncertainty."""

__version__ = "0.1.0"
