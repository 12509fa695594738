"""The key schedule of every trainer's seeds, for a host loop that must reproduce them.

A caller that steps its own environment (a Python loop, bsuite, a dm_env) uses the host step
API of :mod:`hyperx.agents.core` (``agent.act`` / ``agent.observe``). To get the numbers of
:func:`hyperx.agents.deepsea.train_deepsea`'s seed ``s`` of base seed ``seed`` it must use the
same keys, which this module provides (the training program itself calls these functions, so
the two cannot drift apart):

* ``run_key(seed, s) = fold_in(PRNGKey(seed), s)``;
* ``(k_init, k) = split(run_key)``: ``agent.init(k_init)``, ``k`` starts the step chain;
* every env step ``(k, k_act, k_obs) = split(k, 3)``: ``agent.act(state, k_act, obs)``,
  then ``agent.observe(state, k_obs, transition)``.

:class:`KeySchedule` iterates that chain.

A stated exception: the bandit runner (:func:`hyperx.bandits.runner.run_bandit`) keys seed
``s`` the same way, ``fold_in(PRNGKey(seed), s)``, but splits that key its own way:
``(k_env, k_learner, k) = split(key, 3)``, then every round
``(k, k_obs, k_act, k_rew, k_upd) = split(k, 5)``. Its environments draw each round's contexts
and rewards from the run's key, which this chain has no keys for, and routing it through this
schedule would change every published bandit number; ``hyperx.bandits`` may not import
``hyperx.agents`` (docs/architecture.md), so it writes its own ``fold_in``.

A second stated exception: the Atari trainer (:func:`hyperx.agents.atari.train_atari`) keys seed
``s`` with :func:`run_key` and steps its chain with :func:`step_keys`, but does not split the
run key: ``agent.init(run_key)``, and the step chain starts at ``fold_in(run_key, 1)``.
Splitting it as :func:`split_run_key` does would change every Atari agent's initial weights and
draws, so every recorded Atari number.
"""

from __future__ import annotations

from collections.abc import Iterator

import jax

from hyperx._validation import check_int

Array = jax.Array

def run_key(seed: int, index: int) -> Array:
    """The key of seed ``index`` of a run with base seed ``seed``: ``fold_in(PRNGKey(seed),
    index)``, so a seed's draws do not depend on how many seeds share the batch."""
    return jax.random.fold_in(jax.random.PRNGKey(seed), index)


def split_run_key(key: Array) -> tuple[Array, Array]:
    """``(k_init, k_steps) = split(key)``: the agent's init key and the first step-chain key."""
    k_init, k_steps = jax.random.split(key)
    return k_init, k_steps


def step_keys(key: Array) -> tuple[Array, Array, Array]:
    """One env step's keys ``(next_key, k_act, k_obs) = split(key, 3)``."""
    next_key, k_act, k_obs = jax.random.split(key, 3)
    return next_key, k_act, k_obs


class KeySchedule(Iterator[tuple[Array, Array]]):
    """The keys :func:`~hyperx.agents.deepsea.train_deepsea` gives seed ``index`` of base seed
    ``seed``: ``init_key`` for ``agent.init``, then ``next(schedule) -> (k_act, k_obs)`` per
    env step::

        keys = KeySchedule(seed=0, index=0)
        state = agent.init(keys.init_key)
        for each env step:
            k_act, k_obs = next(keys)
            action = agent.act(state, k_act, obs)
            state = agent.observe(state, k_obs, transition)
    """

    def __init__(self, seed: int = 0, index: int = 0):
        check_int("seed", seed, low=0)
        check_int("index", index, low=0)
        self.init_key, self._key = split_run_key(run_key(seed, index))
        self.steps = 0
        self._step_keys = jax.jit(step_keys)

    def __next__(self) -> tuple[Array, Array]:
        self._key, k_act, k_obs = self._step_keys(self._key)
        self.steps += 1
        return k_act, k_obs
