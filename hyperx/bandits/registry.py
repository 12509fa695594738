"""Bandit learners by name, for ``hyperx bandit`` sweeps and benchmarks.

To add a learner, add one entry to :data:`LEARNERS`: ``name -> factory(spec, **options)``.
The factory receives the run's :class:`~hyperx.bandits.base.BanditSpec` (K, d, T, fixed arms)
and the user's options as keyword arguments, and returns a
:class:`~hyperx.bandits.base.Learner`. It should validate its options eagerly (raise
``ValueError``/``TypeError`` naming the option), because the sweep turns those errors into a
one-line command-line error. Option values arrive already parsed by :func:`parse_value`
(int, float, bool or str), and the names a factory accepts are read from its signature, so
unknown options are rejected before the factory runs. Example::

    LEARNERS["my_learner"] = lambda spec, width=64, lr=1e-3: my_learner(spec, width, lr)

On the command line: ``--agents exact_ts,ensemble_pp:M=16:index=sphere,linucb:alpha=2``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

from hyperx.bandits import baselines, glm, linear, neural
from hyperx.bandits.base import BanditSpec, Learner
from hyperx.bandits.neural_core import NeuralConfig

LearnerFactory = Callable[..., Learner]


def _ensemble_pp(spec: BanditSpec, M: int = 16, index: str = "gaussian",  # noqa: N803
                 noise_std: float = 1.0, prior_var: float = 10.0) -> Learner:
    del spec
    return linear.ensemble_pp(M, index=index, noise_std=noise_std, prior_var=prior_var)


def _linucb(spec: BanditSpec, alpha: float | None = None, confidence: str = "fixed",
            delta: float = 0.05, noise_std: float = 1.0, prior_var: float = 10.0) -> Learner:
    del spec
    return linear.linucb(alpha, confidence=confidence, delta=delta, noise_std=noise_std,
                         prior_var=prior_var)


def _epsilon_greedy(spec: BanditSpec, epsilon: float = 0.1, mean: str = "ridge",
                    ridge: float = 1.0) -> Learner:
    del spec
    return baselines.epsilon_greedy(epsilon, mean=mean, ridge=ridge)


LEARNERS: dict[str, LearnerFactory] = {
    "exact_ts": lambda spec, noise_std=1.0, prior_var=10.0: linear.exact_ts(
        noise_std=noise_std, prior_var=prior_var),
    "linucb": _linucb,
    "ensemble_pp": _ensemble_pp,
    "logistic_ts": lambda spec, prior_var=10.0: glm.logistic_ts(prior_var=prior_var),
    "epsilon_greedy": _epsilon_greedy,
    "uniform": lambda spec: baselines.uniform_random(),
}


def _neural(name: str) -> LearnerFactory:
    """Factory of the neural learner ``name`` with the per-game preset ``game``."""

    def factory(spec: BanditSpec, game: str = "reference", learning_rate: float = 1e-4,
                width: int = 64, depth: int = 2, batch_size: int = 128) -> Learner:
        del spec
        config = NeuralConfig(hidden=(width,) * depth, learning_rate=learning_rate,
                              batch_size=batch_size)
        return neural.neural_learner(name, game, config=config)

    return factory


LEARNERS.update({name: _neural(name) for name in neural.NEURAL_LEARNERS})


def parse_value(text: str) -> int | float | bool | str:
    """``"16"`` -> 16, ``"1e6"`` -> 1000000 (integral, in exponent notation), ``"0.1"`` -> 0.1,
    ``"true"``/``"false"`` -> bool, anything else: str (``"nan"`` and ``"inf"`` are floats,
    which the learners' range checks then reject)."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return text
    if "e" in lowered and math.isfinite(number) and number == int(number) and "." not in text:
        return int(number)
    return number


def parse_agent(text: str) -> tuple[str, dict[str, Any]]:
    """Parse ``name[:key=value[,key=value...]]`` (``,`` or ``:`` between options).

    Raises ``ValueError`` with a one-line message for empty names, missing ``=`` or repeated
    keys. Example: ``"ensemble_pp:M=16,index=sphere"`` -> ``("ensemble_pp", {"M": 16,
    "index": "sphere"})``.
    """
    name, _, rest = text.strip().partition(":")
    if not name:
        raise ValueError(f"agent {text!r}: expected NAME[:KEY=VALUE,...]")
    options: dict[str, Any] = {}
    for item in filter(None, rest.replace(":", ",").split(",")):
        key, eq, value = item.partition("=")
        if not eq or not key or not value:
            raise ValueError(f"agent {text!r}: option {item!r} is not KEY=VALUE")
        if key in options:
            raise ValueError(f"agent {text!r}: option {key!r} given twice")
        options[key] = parse_value(value)
    return name, options


def split_agents(text: str) -> list[str]:
    """Split ``--agents`` into agent specs: a comma starts a new agent unless it follows an
    option (``a,b:M=4,index=sphere,c`` -> ``["a", "b:M=4,index=sphere", "c"]``)."""
    agents: list[str] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if agents and ":" in agents[-1] and "=" in part and ":" not in part:
            agents[-1] += "," + part
        else:
            agents.append(part)
    return agents


def _check_option(agent: str, key: str, value: Any, default: Any) -> None:
    """The option's value must have its default's type (an int where an int is expected;
    a float option also takes an int)."""
    kinds = {bool: (bool,), int: (int,), float: (int, float), str: (str,)}
    expected = kinds.get(type(default))
    if expected is None:
        return
    if (isinstance(value, bool) and type(default) is not bool) or not isinstance(value, expected):
        want = {bool: "true or false", int: "an integer", float: "a number",
                str: "a string"}[type(default)]
        raise ValueError(f"agent {agent!r}: option {key}: expected {want}, got {value!r}")


def make_learner(name: str, spec: BanditSpec, options: dict[str, Any]) -> Learner:
    """Build learner ``name`` for ``spec`` with ``options`` (validated against the factory:
    known names, the defaults' types, then the factory's own range checks)."""
    if name not in LEARNERS:
        raise ValueError(f"agent: expected one of {sorted(LEARNERS)}, got {name!r}")
    factory = LEARNERS[name]
    parameters = dict(list(inspect.signature(factory).parameters.items())[1:])
    unknown = sorted(set(options) - set(parameters))
    if unknown:
        raise ValueError(f"agent {name!r}: unknown option(s) {unknown}; "
                         f"accepted: {list(parameters)}")
    for key, value in options.items():
        _check_option(name, key, value, parameters[key].default)
    return factory(spec, **options)


def describe_learners() -> str:
    """One line per learner: its name and its options with their defaults."""
    lines = []
    for name, factory in LEARNERS.items():
        parameters = list(inspect.signature(factory).parameters.values())[1:]
        options = ", ".join(f"{p.name}={p.default}" for p in parameters) or "(no options)"
        lines.append(f"{name:<24} {options}")
    return "\n".join(lines)
