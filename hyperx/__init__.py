"""hyperx: JAX-native exploration under uncertainty."""

from hyperx import envs as envs  # also registers "hyperx/DeepSea-v0" with gymnasium
from hyperx._validation import checked as checked

__version__ = "0.1.0"
