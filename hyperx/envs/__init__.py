"""JAX environments; DeepSea is also registered with gymnasium when it is installed."""

from importlib.util import find_spec

from hyperx.envs import bandits, deepsea, text_bandit
from hyperx.envs.bandits import BanditEnv, make_bandit_env

__all__ = ["BanditEnv", "bandits", "deepsea", "make_bandit_env", "text_bandit"]

if find_spec("gymnasium") is not None:
    import gymnasium

    if "hyperx/DeepSea-v0" not in gymnasium.registry:
        gymnasium.register(id="hyperx/DeepSea-v0",
                           entry_point="hyperx.envs.deepsea:DeepSeaGymEnv")
