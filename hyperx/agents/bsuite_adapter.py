"""A dm_env / bsuite adapter: a hyperx agent in bsuite's own loop and CSV logging.

:class:`BsuiteAgent` implements ``bsuite.baselines.base.Agent`` (``select_action(timestep)``
and ``update(timestep, action, new_timestep)``) over the host step API of
:mod:`hyperx.agents.core`, so a bsuite user writes::

    import bsuite
    from bsuite.baselines import experiment
    from hyperx.agents import get_config
    from hyperx.agents.bsuite_adapter import BsuiteAgent

    env = bsuite.load_and_record_to_csv("deep_sea/0", results_dir="bsuite_csv")
    agent = BsuiteAgent(get_config("hyperagent"), env.observation_spec().shape[0],
                        step_budget=20_000)
    experiment.run(agent, env, num_episodes=1000)

Observations: DeepSea's (N, N) one-hot is decoded to the compact state id ``row * N +
column`` the agent's embedding torso reads (Osband et al., bsuite, ICLR 2020), and bsuite's
all-zero observation after the last row (the terminal step) is mapped to id 0: a terminal
transition (``discount == 0``) never bootstraps, so its successor's value is unused. With
``encoding="raw"`` any dm_env with a flat float observation drives the MLP torso instead.

Reproducibility: keys come from :class:`hyperx.agents.keys.KeySchedule`, so seed ``index`` of
base seed ``seed`` on bsuite's DeepSea with mapping seed 42 gets the keys (and, up to float
round-off of a different batch shape, the episodes) of
:func:`hyperx.agents.deepsea.train_deepsea`'s seed ``index``. ``Agent.jit()`` donates the
state, so ``update`` does not copy the replay buffer.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from hyperx._validation import check_choice, check_int
from hyperx.agents.config import AgentConfig
from hyperx.agents.core import Transition, make_agent
from hyperx.agents.keys import KeySchedule

try:  # bsuite is optional: the adapter only needs the interface's two methods
    from bsuite.baselines.base import Agent as _BsuiteBase
except ImportError:  # pragma: no cover
    _BsuiteBase = object

ENCODINGS = ("one_hot", "raw")


def decode_one_hot(observation: Any, size: int) -> int:
    """DeepSea's (N, N) one-hot -> ``row * N + column``; the all-zero terminal one -> 0."""
    flat = np.asarray(observation).reshape(-1)
    if flat.shape[0] != size * size:
        raise ValueError(f"observation: expected {size * size} entries (an {size} x {size} "
                         f"one-hot), got shape {np.shape(observation)}")
    return int(np.argmax(flat)) if flat.any() else 0


class BsuiteAgent(_BsuiteBase):
    """A hyperx agent (:func:`hyperx.agents.make_agent`, jitted with donation) as a bsuite
    agent.

    Args:
      config: the agent's configuration (``get_config("hyperagent")``).
      size: DeepSea's N (``encoding="one_hot"``: N x N states); ignored for ``"raw"``.
      num_actions: the environment's number of actions (2 for DeepSea).
      seed, index: the key schedule (:class:`~hyperx.agents.keys.KeySchedule`).
      step_budget: env steps of the run (sizes the replay: ``min(buffer_size, budget)``).
      encoding: ``"one_hot"`` (DeepSea) or ``"raw"`` (flat float observations).
      obs_example: for ``"raw"``, one observation (its shape and dtype).
    """

    def __init__(self, config: AgentConfig, size: int, *, num_actions: int = 2, seed: int = 0,
                 index: int = 0, step_budget: int | None = None, encoding: str = "one_hot",
                 obs_example: Any = None):
        check_choice("encoding", encoding, ENCODINGS)
        self.size, self.encoding = size, encoding
        if encoding == "one_hot":
            check_int("size", size)
            agent = make_agent(config, num_actions, jnp.int32(0), num_states=size * size,
                               step_budget=step_budget)
        else:
            if obs_example is None:
                raise ValueError("obs_example: expected one observation for encoding='raw'")
            agent = make_agent(config, num_actions, jnp.asarray(obs_example, jnp.float32),
                               step_budget=step_budget)
        self.agent = agent.jit()
        self.keys = KeySchedule(seed, index)
        self.state = self.agent.init(self.keys.init_key)
        self._k_obs = None

    def encode(self, observation: Any) -> Any:
        """The agent's observation of a dm_env observation."""
        if self.encoding == "one_hot":
            return jnp.int32(decode_one_hot(observation, self.size))
        return jnp.asarray(observation, jnp.float32)

    def select_action(self, timestep: Any) -> int:
        """The action for ``timestep.observation`` under the current episode's index."""
        k_act, self._k_obs = next(self.keys)
        return int(self.agent.act(self.state, k_act, self.encode(timestep.observation)))

    def update(self, timestep: Any, action: int, new_timestep: Any) -> None:
        """Store the transition (terminal when ``new_timestep`` is last with discount 0, a
        truncation when last with a positive discount) and learn when due."""
        if self._k_obs is None:
            raise RuntimeError("update: call select_action(timestep) first")
        last = bool(new_timestep.last())
        terminal = last and float(new_timestep.discount) == 0.0
        transition = Transition(self.encode(timestep.observation), jnp.int32(action),
                                jnp.float32(new_timestep.reward),
                                self.encode(new_timestep.observation), jnp.bool_(terminal),
                                jnp.bool_(last and not terminal))
        self.state = self.agent.observe(self.state, self._k_obs, transition)
        self._k_obs = None
