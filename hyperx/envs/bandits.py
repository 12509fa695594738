"""Contextual-bandit environments as pure JAX functions (jit/vmap over seeds).

An environment is a :class:`BanditEnv`: ``init(key) -> env_state`` draws the per-seed problem
(e.g. theta*), ``observe(env_state, key, t) -> Round`` draws round ``t``'s arm features together
with EVERY arm's expected reward, and ``reward(env_state, key, round, arm)`` draws the noisy reward
of the pulled arm. Because each round carries all expected rewards, regret is expected regret,
``max_k mu_k - mu_arm``, not noisy realised regret.

The expected rewards travel with the round (instead of being a function of the arm features)
because in classification-as-bandit they depend on the hidden label, not on the features alone.

Games (``make_bandit_env(name, **kwargs)``):

- ``russo``: the finite-arm linear game of Russo & Van Roy, "Learning to Optimize via
  Information-Directed Sampling": theta* ~ N(0, 10 I_d) per seed, K arm features i.i.d.
  Unif(-1/sqrt(5), 1/sqrt(5))^d fixed within a seed, reward x^T theta* + N(0, 1).
- ``russo_contextual``: the same, with fresh arm features every round.
- ``quadratic``: mu(x) = 0.01 x^T G G^T x, G in R^{d x d} with N(0, 1) entries (Li et al.,
  "Scalable Exploration via Ensemble++", arXiv:2407.13195; the authors' code draws G and a pool
  of 1000 unit-sphere candidate arms, offers 50 of them without replacement each round, and adds
  N(0, 0.1^2) noise). Here G and the pool are redrawn per seed (the authors fix them across runs;
  ``instance_seed=`` does that).
- ``neural_regression`` / ``neural_classification``: mu(x) is a random frozen MLP (d-50-50-out,
  ReLU, Xavier-normal weights, PyTorch-default uniform biases) of the arm feature, on the same
  candidate pool as ``quadratic``. Regression: one output plus N(0, 0.1^2) noise.
  Classification: two logits, mu(x) = softmax(logits)_1, Bernoulli(mu) reward.
- ``logistic``: GLM bandit, mu(x) = sigmoid(x^T theta*), theta* ~ N(0, prior_var I), arms as in
  ``russo_contextual`` (or fixed with ``fixed_arms=True``), Bernoulli reward.
- ``digits``, ``wine``, ``breast_cancer``, ``iris``: classification-as-bandit (the Ensemble++
  paper's UCI shuttle/mushroom games cannot be fetched offline; these sets ship with
  scikit-learn). Each round one labelled example is drawn uniformly with replacement, arms are
  the classes, reward 1 for the correct class (so mu = one_hot(label), noiseless). Features are
  standardised per column. Arm encodings: ``disjoint`` (default; x_k = e_k kron x, dimension
  K p: what a linear learner needs to give each class its own weights) or ``concat``
  (x_k = [x, e_k], dimension p + K: for neural learners).
- ``text``: the Ensemble++ paper's hate-speech bandit (block / publish a text, features from a
  frozen causal LM's hidden state, cached per data set): ``make_bandit_env("text", data=...,
  model=..., **options)`` with the options of :func:`hyperx.envs.text_bandit.text_bandit`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from hyperx._validation import (
    check_choice,
    check_int,
    check_memory,
    check_positive,
    device_memory_bytes,
)
from hyperx.envs.bandit_base import (
    ENCODINGS,
    BanditEnv,
    Round,
    arm_features,
    bernoulli_reward,
    gaussian_reward,
    no_state,
    standardize_columns,
)
from hyperx.envs.text_bandit import text_bandit

__all__ = ["BanditEnv", "Round", "bandit_env_names", "classification", "logistic",
           "make_bandit_env", "neural", "quadratic", "russo"]

Array = jax.Array

_DATASETS = ("digits", "wine", "breast_cancer", "iris")
_POOL_HIDDEN = (50, 50)


def _check_sizes(num_arms: int, dim: int) -> None:
    check_int("num_arms", num_arms, low=2)
    check_int("dim", dim)


def _check_instance_memory(name: str, values: int, what: str) -> None:
    """Refuse a game whose one-seed instance (``values`` float32 numbers) cannot fit in device
    memory, when it is built and before anything is allocated (a run of many seeds is then
    sized by :func:`hyperx.bandits.runner.run_bandit`)."""
    check_memory(name, 4 * values, device_memory_bytes(), f"device memory for {what}")


def _uniform_arms(key: Array, num_arms: int, dim: int, bound: float) -> Array:
    return jax.random.uniform(key, (num_arms, dim), jnp.float32, -bound, bound)


def _linear_game(
    name: str, dim: int, num_arms: int, *, fixed_arms: bool, prior_var: float,
    arm_bound: float, link: Callable[[Array], Array], reward_fn,
) -> BanditEnv:
    _check_sizes(num_arms, dim)
    check_positive("prior_var", prior_var)
    check_positive("arm_bound", arm_bound)
    # the K x d arm features and the K means (held for the run, or drawn every round)
    _check_instance_memory(f"num_arms = {num_arms}, dim = {dim}", num_arms * (dim + 1) + dim,
                           f"one seed's {num_arms:,} x {dim} arm features")

    def init(key: Array) -> dict[str, Array]:
        k_theta, k_arms = jax.random.split(key)
        theta = math.sqrt(prior_var) * jax.random.normal(k_theta, (dim,), jnp.float32)
        state = {"theta": theta}
        if fixed_arms:  # the means never change: computed once, not once per round
            state["arms"] = _uniform_arms(k_arms, num_arms, dim, arm_bound)
            state["means"] = link(state["arms"] @ theta)
        return state

    def observe(env_state: dict[str, Array], key: Array, t: Array) -> Round:
        del t
        if fixed_arms:
            return Round(env_state["arms"], env_state["means"])
        arms = _uniform_arms(key, num_arms, dim, arm_bound)
        return Round(arms, link(arms @ env_state["theta"]))

    return BanditEnv(name, num_arms, dim, fixed_arms, init, observe, reward_fn)


def russo(
    dim: int = 50, num_arms: int = 1000, *, prior_var: float = 10.0, noise_std: float = 1.0,
    arm_bound: float = 1 / math.sqrt(5), contextual: bool = False,
) -> BanditEnv:
    """Russo & Van Roy's finite-arm linear Gaussian game.

    theta* ~ N(0, prior_var I_d); arms x_k ~ Unif(-arm_bound, arm_bound)^d (fixed per seed, or
    fresh every round when ``contextual``); reward x^T theta* + N(0, noise_std^2).
    """
    check_positive("noise_std", noise_std, allow_zero=True)
    name = "russo_contextual" if contextual else "russo"
    return _linear_game(
        name, dim, num_arms, fixed_arms=not contextual, prior_var=prior_var,
        arm_bound=arm_bound, link=lambda z: z, reward_fn=gaussian_reward(noise_std),
    )


def logistic(
    dim: int = 10, num_arms: int = 20, *, prior_var: float = 10.0,
    arm_bound: float = 1 / math.sqrt(5), fixed_arms: bool = False,
) -> BanditEnv:
    """GLM (logistic) bandit: Bernoulli reward with mean sigmoid(x^T theta*).

    theta* ~ N(0, prior_var I_d); arms Unif(-arm_bound, arm_bound)^d, fresh every round unless
    ``fixed_arms``.
    """
    return _linear_game(
        "logistic", dim, num_arms, fixed_arms=fixed_arms, prior_var=prior_var,
        arm_bound=arm_bound, link=jax.nn.sigmoid, reward_fn=bernoulli_reward,
    )


def _sphere(key: Array, n: int, dim: int) -> Array:
    x = jax.random.normal(key, (n, dim), jnp.float32)
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


def _pool_game(
    name: str, dim: int, num_arms: int, num_candidates: int,
    mean_fn: Callable[[Array, Array], Array], reward_fn, instance_seed: int | None,
) -> BanditEnv:
    """Arms offered each round: ``num_arms`` of a pool of unit-sphere candidates, drawn per seed
    from the seed's key, or once from ``PRNGKey(instance_seed)`` for every seed alike."""
    _check_sizes(num_arms, dim)
    check_int("num_candidates", num_candidates, low=2)
    if num_candidates < num_arms:
        raise ValueError(
            f"num_candidates: expected >= num_arms = {num_arms}, got {num_candidates}")
    if instance_seed is not None:
        check_int("instance_seed", instance_seed, low=0, high=2**32 - 1)
    # init holds the N x d pool, its image under the mean function and a square of it (the
    # quadratic game's N x d, the neural game's N x 50 hidden units), G (d x d), the N means
    # and a round's N uniforms
    _check_instance_memory(f"num_candidates = {num_candidates}, dim = {dim}",
                           num_candidates * (dim + 2 * max(dim, _POOL_HIDDEN[0]) + 2) + dim * dim,
                           f"one seed's pool of {num_candidates:,} candidate arms of dimension "
                           f"{dim}")

    def init(key: Array) -> dict[str, Array]:
        if instance_seed is not None:
            key = jax.random.PRNGKey(instance_seed)
        k_pool, k_fn = jax.random.split(key)
        pool = _sphere(k_pool, num_candidates, dim)
        return {"pool": pool, "means": mean_fn(k_fn, pool)}

    def observe(env_state: dict[str, Array], key: Array, t: Array) -> Round:
        del t
        # The K largest of N i.i.d. uniforms index a uniformly random K-subset; top_k is ~10x
        # faster on CPU than jax.random.choice(replace=False), which sorts a permutation.
        idx = jax.lax.top_k(jax.random.uniform(key, (num_candidates,)), num_arms)[1]
        return Round(env_state["pool"][idx], env_state["means"][idx])

    return BanditEnv(name, num_arms, dim, False, init, observe, reward_fn)


def quadratic(
    dim: int = 100, num_arms: int = 50, *, num_candidates: int = 1000, noise_std: float = 0.1,
    scale: float = 0.01, instance_seed: int | None = None,
) -> BanditEnv:
    """Quadratic game: mu(x) = scale * x^T G G^T x, G_ij ~ N(0, 1), Gaussian reward noise.

    G and the candidate pool are drawn per seed; with ``instance_seed`` they are drawn once
    from ``PRNGKey(instance_seed)`` and shared by every seed, as the reference code draws them
    once for all its runs (only the offered arms and the reward noise then differ by seed).
    """
    check_positive("noise_std", noise_std, allow_zero=True)
    check_positive("scale", scale)

    def mean_fn(key: Array, pool: Array) -> Array:
        g = jax.random.normal(key, (dim, dim), jnp.float32)
        return scale * jnp.sum((pool @ g) ** 2, axis=-1)

    return _pool_game("quadratic", dim, num_arms, num_candidates, mean_fn,
                      gaussian_reward(noise_std), instance_seed)


def _random_mlp(key: Array, sizes: tuple[int, ...], x: Array) -> Array:
    """A frozen MLP with Xavier-normal weights and Unif(+-1/sqrt(fan_in)) biases, ReLU."""
    h = x
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        key, k_w, k_b = jax.random.split(key, 3)
        w = math.sqrt(2.0 / (fan_in + fan_out)) * jax.random.normal(k_w, (fan_in, fan_out))
        bound = 1.0 / math.sqrt(fan_in)
        b = jax.random.uniform(k_b, (fan_out,), jnp.float32, -bound, bound)
        h = h @ w + b
        if i < len(sizes) - 2:
            h = jax.nn.relu(h)
    return h


def neural(
    dim: int = 100, num_arms: int = 50, *, task: str = "regression", num_candidates: int = 1000,
    noise_std: float = 0.1, instance_seed: int | None = None,
) -> BanditEnv:
    """Neural game: mu(x) from a random frozen MLP (d-50-50-out) of the arm feature.

    ``task="regression"``: mu(x) = MLP(x) with one output, reward mu + N(0, noise_std^2).
    ``task="classification"``: two logits, mu(x) = softmax(MLP(x))_1, Bernoulli(mu) reward.
    ``instance_seed``: the MLP and the pool shared by every seed (see :func:`quadratic`).
    """
    check_choice("task", task, ("regression", "classification"))
    check_positive("noise_std", noise_std, allow_zero=True)
    out = 1 if task == "regression" else 2
    sizes = (dim, *_POOL_HIDDEN, out)

    def mean_fn(key: Array, pool: Array) -> Array:
        logits = _random_mlp(key, sizes, pool)
        return logits[:, 0] if out == 1 else jax.nn.softmax(logits, axis=-1)[:, 1]

    reward_fn = gaussian_reward(noise_std) if out == 1 else bernoulli_reward
    return _pool_game(f"neural_{task}", dim, num_arms, num_candidates, mean_fn, reward_fn,
                      instance_seed)


def _load_dataset(dataset: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        from sklearn import datasets
    except ImportError as err:
        raise ImportError(
            f"dataset {dataset!r} needs scikit-learn (pip install scikit-learn)") from err
    data = getattr(datasets, f"load_{dataset}")()
    x = standardize_columns(np.asarray(data.data, np.float64))
    _, y = np.unique(np.asarray(data.target), return_inverse=True)
    return x.astype(np.float32), y.astype(np.int32)


def classification(dataset: str, *, encoding: str = "disjoint") -> BanditEnv:
    """Classification-as-bandit on a scikit-learn bundled data set (no download).

    Each round draws one example (x, y) uniformly with replacement; arm k is "predict class k",
    with mean 1[k = y] and a noiseless reward. ``encoding`` builds the K arm features from x
    (p features): ``disjoint`` gives x_k = e_k kron x in R^{K p}; ``concat`` gives
    x_k = [x, e_k] in R^{p + K}.
    """
    check_choice("dataset", dataset, _DATASETS)
    check_choice("encoding", encoding, ENCODINGS)
    x_np, y_np = _load_dataset(dataset)
    features, labels = jnp.asarray(x_np), jnp.asarray(y_np)
    num_examples, p = x_np.shape
    k = int(y_np.max()) + 1
    eye = jnp.eye(k, dtype=jnp.float32)
    dim = k * p if encoding == "disjoint" else p + k

    def observe(env_state: Array, key: Array, t: Array) -> Round:
        del env_state, t
        i = jax.random.randint(key, (), 0, num_examples)
        return Round(arm_features(features[i], k, encoding), eye[labels[i]])

    return BanditEnv(dataset, k, dim, False, no_state, observe, gaussian_reward(0.0))


def _text_game(data: Any = None, model: Any = None, **kwargs: Any) -> BanditEnv:
    """The text-feature bandit; ``data`` and ``model`` are required (named in the error)."""
    if data is None:
        raise ValueError("data: the text game needs data=, a CSV file, a datasets folder or a "
                         "(texts, labels) pair")
    if model is None:
        raise ValueError("model: the text game needs model=, a transformers Flax causal LM "
                         "folder or a cached hub name")
    return text_bandit(data, model, **kwargs)


_GAMES: dict[str, Callable[..., BanditEnv]] = {
    "russo": russo,
    "russo_contextual": lambda *a, **kw: russo(*a, contextual=True, **kw),
    "quadratic": quadratic,
    "neural_regression": lambda *a, **kw: neural(*a, task="regression", **kw),
    "neural_classification": lambda *a, **kw: neural(*a, task="classification", **kw),
    "logistic": logistic,
    **{name: (lambda n: lambda **kw: classification(n, **kw))(name) for name in _DATASETS},
    "text": _text_game,
}


def make_bandit_env(name: str, **kwargs: Any) -> BanditEnv:
    """Build a game by name (see the module docstring); ``kwargs`` go to its factory.

    Raises ``ValueError`` naming the argument for an unknown ``name``, fewer than 2 arms, a
    non-positive dimension, a missing ``data`` / ``model`` of the ``text`` game, or a game whose
    one-seed instance cannot fit in device memory (``ValueError`` with the estimate: K (d + 1)
    float32 values of arm features and means for the linear games, about N (3 d + 2) for a
    pool of N candidates).
    """
    check_choice("name", name, tuple(_GAMES))
    return _GAMES[name](**kwargs)


def bandit_env_names() -> tuple[str, ...]:
    """The names ``make_bandit_env`` accepts."""
    return tuple(_GAMES)
