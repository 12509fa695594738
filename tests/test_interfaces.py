"""The interfaces users pass around (Agent, ReplayBuffer, bandit Learner, LLM Trainer,
GameLearner, LinearModel, LanguageModel) are NamedTuples whose function fields are typed by
Protocols (optax's style), so an editor shows each call's parameters. These tests hold the
Protocols to the real functions: a built object's every function field takes exactly the
parameters, in order, that its Protocol names."""

from __future__ import annotations

import inspect
import typing

import jax.numpy as jnp
import pytest

from hyperx.agents.config import get_config
from hyperx.agents.core import Agent, make_agent
from hyperx.bandits import base as bandit_base
from hyperx.bandits.baselines import epsilon_greedy, uniform_random
from hyperx.bandits.glm import logistic_ts
from hyperx.bandits.linear import ensemble_pp, exact_ts, linucb
from hyperx.bandits.neural import neural_ensemble_pp
from hyperx.games.learners import LEARNERS, GameLearner, PlayerSpec, make_learner
from hyperx.linear import (
    LinearModel,
    ensemble_pp_posterior,
    ensemble_pp_recompute,
    exact_posterior,
)
from hyperx.llm import train as llm_train
from hyperx.llm.model import LanguageModel, transformer_lm
from hyperx.llm.moe import MoEConfig
from hyperx.llm.tasks import Task
from hyperx.replay import ReplayBuffer, make_replay_buffer
from hyperx.replay_frames import make_frame_replay


def protocol_of(annotation):
    """The Protocol class of a field annotation (``P`` or ``P | None``), else None."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and getattr(candidate, "_is_protocol", False):
            return candidate
    return None


def parameter_names(fn) -> list[str]:
    return list(inspect.signature(fn).parameters)


def check_fields(obj, cls) -> int:
    """Assert every Protocol-typed field of ``obj`` (an instance of ``cls``) matches; return
    how many fields were checked."""
    hints = typing.get_type_hints(cls)
    checked = 0
    for name in cls._fields:
        proto = protocol_of(hints[name])
        fn = getattr(obj, name)
        if proto is None or fn is None:
            continue
        expected = [p for p in inspect.signature(proto.__call__).parameters if p != "self"]
        assert parameter_names(fn) == expected, (cls.__name__, name)
        checked += 1
    return checked


@pytest.mark.parametrize("num_envs", [None, 3])
def test_agent_functions_take_what_their_protocols_name(num_envs):
    agent = make_agent(get_config("hyperagent"), 2, jnp.zeros(4), num_envs=num_envs)
    assert check_fields(agent, Agent) == 7
    assert check_fields(agent.jit(), Agent) == 7


def test_replay_functions_take_what_their_protocols_name():
    assert check_fields(make_replay_buffer(3, 0.9), ReplayBuffer) == 5
    assert check_fields(make_frame_replay(3, 0.9, num_streams=2), ReplayBuffer) == 5


@pytest.mark.parametrize("make", [uniform_random, lambda: epsilon_greedy(0.1), exact_ts,
                                  ensemble_pp, linucb, logistic_ts, neural_ensemble_pp],
                         ids=["uniform", "epsilon_greedy", "exact_ts", "ensemble_pp", "linucb",
                              "logistic_ts", "neural_ensemble_pp"])
def test_learner_functions_take_what_their_protocols_name(make):
    learner = make()
    assert check_fields(learner, bandit_base.Learner) >= 3


def test_delayed_learner_functions_take_what_their_protocols_name():
    assert check_fields(bandit_base.delayed(linucb(), 4), bandit_base.Learner) >= 3


def test_trainer_functions_take_what_their_protocols_name():
    task = Task("addition", 2)
    module, _ = llm_train.make_policy(task, d_model=16)
    trainer = llm_train.make_trainer(*llm_train.transformer_lms(module, "float32"), task,
                                     llm_train.RLConfig(prompts_per_step=2, group_size=2))
    assert check_fields(trainer, llm_train.Trainer) == 5


@pytest.mark.parametrize("name", sorted(LEARNERS))
def test_game_learner_functions_take_what_their_protocols_name(name):
    spec = PlayerSpec(player=0, num_actions=(3, 2), horizon=10)
    assert check_fields(make_learner(name, spec), GameLearner) == 3


@pytest.mark.parametrize("make", [lambda: exact_posterior(3, noise_std=1.0),
                                  lambda: ensemble_pp_posterior(3, 2, noise_std=1.0),
                                  lambda: ensemble_pp_recompute(3, 2, noise_std=1.0)],
                         ids=["exact", "ensemble_pp", "ensemble_pp_recompute"])
def test_linear_model_functions_take_what_their_protocols_name(make):
    assert check_fields(make(), LinearModel) == 4


@pytest.mark.parametrize("moe", [None, MoEConfig(num_experts=2, top_k=1, expert_hidden=8)],
                         ids=["dense", "moe"])
def test_language_model_functions_take_what_their_protocols_name(moe):
    module = llm_train.policy_module(Task("addition", 1), d_model=16, num_layers=1,
                                     num_heads=2, moe=moe)
    assert check_fields(transformer_lm(module), LanguageModel) == (3 if moe is None else 5)


def test_a_protocol_that_names_other_parameters_is_caught():
    """The check itself can fail: a function with renamed parameters does not pass."""
    agent = make_agent(get_config("dqn"), 2, jnp.zeros(4))
    renamed = agent._replace(act=lambda s, k, o: agent.act(s, k, o))
    with pytest.raises(AssertionError):
        check_fields(renamed, Agent)
