"""Neural contextual-bandit learners over one engine (:mod:`hyperx.bandits.neural_core`).

Index-sampled learners act greedily on one sampled member ``argmax_k f(x_k, zeta)`` and train on
the perturbed loss ``mean_{i,j} (y_i + sigma <xi_j, z_i> - f(x_i, xi_j))^2 + lambda/|D|
||theta||^2`` (:func:`hyperx.losses.perturbed_regression_loss`):

* :func:`neural_ensemble_pp`: the neural Ensemble++ head (Li et al., Scalable Exploration via
  Ensemble++, arXiv:2407.13195); update indices = the whole "pm" support +-sqrt(M) e_i, acting
  zeta = sqrt(M) Unif(S^{M-1}).
* :func:`neural_hyperagent`: the hypermodel head on an MLP torso with a frozen prior copy (Li et
  al., HyperAgent, ICML 2024, arXiv:2402.10228); sphere index (M = 4), ``num_indices`` fresh
  indices per gradient step.
* :func:`neural_ensemble_plus`: M independent MLPs with frozen random priors (Osband et al.,
  Randomized Prior Functions, NeurIPS 2018); one-hot indices, every member on every sample;
  acting picks one member uniformly.
* :func:`neural_epinet`: the epinet (Osband et al., Epistemic Neural Networks, NeurIPS 2023),
  z ~ N(0, I_8), ``num_indices`` fresh indices per gradient step.

Gradient-feature baselines train one MLP ``f(x; theta)`` on the unperturbed squared loss and use
g(x) = grad_theta f(x; theta) with the diagonal approximation of the design matrix that the
NeuralUCB / NeuralTS papers use in their experiments: ``Z = lambda + sum_s g(x_s)^2 / m``
(elementwise; m = the last hidden width), each g taken at the parameters current when x_s is
observed:

* :func:`neural_ucb` (Zhou, Li, Gu, ICML 2020): ``f(x_k) + nu sqrt(sum_j g_j(x_k)^2 / (m Z_j))``;
* :func:`neural_ts` (Zhang, Zhou, Li, Gu, ICLR 2021): ``f(x_k) + nu s_k eps_k``, eps_k ~ N(0, 1),
  ``s_k^2 = lambda sum_j g_j(x_k)^2 / (m Z_j)``.

:func:`neural_epsilon_greedy` plays the same MLP greedily, uniformly at random w.p. epsilon.

:func:`neural_learner` builds any of them by name with the per-game presets of the Ensemble++
reference code (:data:`PRESETS`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from hyperx._validation import check_choice, check_int, check_positive, check_range
from hyperx.bandits.base import Learner
from hyperx.bandits.neural_core import (
    Batch,
    NeuralConfig,
    NeuralModel,
    check_config,
    make_neural_learner,
)
from hyperx.heads import (
    EnsemblePPHead,
    EpinetHead,
    HypermodelHead,
    MLPTorso,
    Network,
    RandomPriorEnsembleHead,
    make_network,
    with_params,
)
from hyperx.index import IndexDistribution, make_index
from hyperx.losses import perturbed_regression_loss

Array = jax.Array
DEFAULT_CONFIG = NeuralConfig()

# Per-game settings of the neural Ensemble++ reference code (arXiv:2407.13195): prior scale,
# posterior scale, gradient steps per training event, env steps between training events.
PRESETS: dict[str, dict[str, float | int]] = {
    "reference": dict(prior_scale=0.1, posterior_scale=0.1, updates_per_step=1, update_every=1),
    "quadratic": dict(prior_scale=5.0, posterior_scale=1.0, updates_per_step=4, update_every=1),
    "neural_classification": dict(prior_scale=0.1, posterior_scale=0.1, updates_per_step=1,
                                  update_every=10),
    "neural_regression": dict(prior_scale=0.2, posterior_scale=0.1, updates_per_step=10,
                              update_every=1),
    "shuttle": dict(prior_scale=0.2, posterior_scale=0.1, updates_per_step=50, update_every=1),
    "mushroom": dict(prior_scale=1.0, posterior_scale=0.1, updates_per_step=50, update_every=1),
    "russo": dict(prior_scale=5.0, posterior_scale=1.0, updates_per_step=10, update_every=1),
}


def _indexed_model(network: Network, act_index: IndexDistribution,
                   update_indices: Callable[[Array], Array], sigma: float, *,
                   reinit: Callable[[Array, Any], Any] | None = None,
                   freeze: Callable[[Any], Any] | None = None) -> NeuralModel:
    """An index-sampled model: act on f(x, zeta), zeta ~ act_index; perturbed loss.

    ``reinit(key, params) -> params`` replaces the network's initial trainable parameters;
    ``freeze(params) -> params`` applies ``stop_gradient`` to the parameters that must keep
    their initial value (their gradient, weight decay included, is then exactly 0, and so is
    Adam's step).
    """
    m = act_index.dim

    def init(key: Array, x: Array) -> dict[str, Any]:
        variables = network.init(key, x, jnp.zeros((m,), jnp.float32))
        if reinit is None:
            return variables
        return with_params(variables, reinit(jax.random.fold_in(key, 1), variables["params"]))

    def scores(variables, extra, key: Array, contexts: Array) -> Array:
        del extra
        return network.apply(variables, contexts, act_index.sample(key))[:, 0]

    def loss(params, variables, key: Array, batch: Batch, weight_decay: float,
             num_data: Array) -> Array:
        xi = update_indices(key)
        if freeze is not None:
            params = freeze(params)
        pred = network.apply(with_params(variables, params), batch.x, xi)[..., 0]
        return perturbed_regression_loss(pred, batch.reward, xi=xi, z=batch.z, sigma=sigma,
                                         params=params, weight_decay=weight_decay,
                                         num_data=num_data, mask=batch.mask)

    return NeuralModel(init, scores, loss, perturbation_dim=m)


def _check_common(index_dim: int, sigma: float, name: str = "index_dim") -> None:
    check_int(name, index_dim)
    check_positive("sigma", sigma, allow_zero=True)


def _sampled(dist: IndexDistribution, num_indices: int) -> Callable[[Array], Array]:
    check_int("num_indices", num_indices)
    return lambda key: dist.sample(key, (num_indices,))


ENSEMBLE_PP_TORSO_INITS = ("default", "torch")
ENSEMBLE_PP_FACTOR_INITS = ("default", "xavier")


def _torch_linear(key: Array, layer: dict[str, Array]) -> dict[str, Array]:
    """PyTorch's ``nn.Linear`` default: kernel and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    k_w, k_b = jax.random.split(key)
    bound = 1.0 / math.sqrt(layer["kernel"].shape[0])
    out = {"kernel": jax.random.uniform(k_w, layer["kernel"].shape, jnp.float32, -bound, bound)}
    if "bias" in layer:
        out["bias"] = jax.random.uniform(k_b, layer["bias"].shape, jnp.float32, -bound, bound)
    return out


def _ensemble_pp_reinit(torso_init: str, factor_init: str, mean_bias: bool,
                        factor_bias: bool) -> Callable[[Array, Any], Any] | None:
    """The initial-parameter map of :func:`ensemble_pp_model`'s reference switches."""
    if (torso_init, factor_init, mean_bias, factor_bias) == ("default", "default", True, True):
        return None

    def reinit(key: Array, params: Any) -> Any:
        params = dict(params)
        k_torso, k_mean, k_a = jax.random.split(key, 3)
        if torso_init == "torch":
            torso = params["torso"]
            keys = jax.random.split(k_torso, len(torso))
            params["torso"] = {name: _torch_linear(k, torso[name])
                               for k, name in zip(keys, sorted(torso), strict=True)}
            params["mean"] = _torch_linear(k_mean, params["mean"])
        hyper = dict(params["hyper"])
        if factor_init == "xavier":  # torch xavier_normal_ of the (O P, M) hyper-layer weight
            o, p, m = hyper["A"].shape
            hyper["A"] = math.sqrt(2.0 / (m + o * p)) * jax.random.normal(k_a, (o, p, m))
        if not factor_bias:
            hyper["b"] = jnp.zeros_like(hyper["b"])
        params["hyper"] = hyper
        if not mean_bias:
            params["mean"] = {**params["mean"], "bias": jnp.zeros_like(params["mean"]["bias"])}
        return params

    return reinit


def _ensemble_pp_freeze(mean_bias: bool, factor_bias: bool) -> Callable[[Any], Any] | None:
    """``stop_gradient`` on the biases that the reference's network does not have."""
    if mean_bias and factor_bias:
        return None

    def freeze(params: Any) -> Any:
        params = dict(params)
        if not mean_bias:
            params["mean"] = {**params["mean"],
                              "bias": jax.lax.stop_gradient(params["mean"]["bias"])}
        if not factor_bias:
            params["hyper"] = {**params["hyper"],
                               "b": jax.lax.stop_gradient(params["hyper"]["b"])}
        return params

    return freeze


def ensemble_pp_model(index_dim: int = 8, *, sigma: float = 0.01, prior_scale: float = 0.1,
                      posterior_scale: float = 0.1, hidden: Sequence[int] = (64, 64),
                      torso_init: str = "default", factor_init: str = "default",
                      mean_bias: bool = True, factor_bias: bool = True) -> NeuralModel:
    """The neural Ensemble++ model of :func:`neural_ensemble_pp` (for custom engines/tests).

    Four switches turn a difference from the reference code (szrlee/Ensemble_Plus_Plus,
    ``network/ensemble_exp.py``) to the reference's choice, one at a time:

    * ``torso_init="torch"``: the torso's and the mean head's kernels and biases
      ~ U(+-1/sqrt(fan_in)) (PyTorch's ``nn.Linear`` default) instead of LeCun-normal kernels
      and zero biases;
    * ``factor_init="xavier"``: A ~ N(0, 2 / (M + P)) (torch ``xavier_normal_`` of the (P, M)
      hyper-layer weight, P = the torso width) instead of a truncated normal of variance 1/M;
    * ``mean_bias=False``: no bias c in the mean head ``w^T h(x) + c`` (the reference's
      ``based_out`` has ``bias=False``): c is held at 0;
    * ``factor_bias=False``: no index-free b in ``<sg(h), A zeta + b>`` (the reference's hyper
      layer has no bias with ``feature_sg=1``): b is held at 0.

    A bias "held at 0" stays a parameter of the network but gets ``stop_gradient`` in the
    loss, so it never moves from its zero initialisation.
    """
    _check_common(index_dim, sigma)
    check_choice("torso_init", torso_init, ENSEMBLE_PP_TORSO_INITS)
    check_choice("factor_init", factor_init, ENSEMBLE_PP_FACTOR_INITS)
    for name, value in (("mean_bias", mean_bias), ("factor_bias", factor_bias)):
        if not isinstance(value, bool):
            raise ValueError(f"{name}: expected a bool, got {value!r}")
    head = EnsemblePPHead(1, index_dim, torso=MLPTorso(tuple(hidden)),
                            prior_scale=prior_scale, posterior_scale=posterior_scale)
    support = make_index("coordinate", index_dim).support()
    return _indexed_model(make_network(head), make_index("scaled_sphere", index_dim),
                          lambda key: support, sigma,
                          reinit=_ensemble_pp_reinit(torso_init, factor_init, mean_bias,
                                                     factor_bias),
                          freeze=_ensemble_pp_freeze(mean_bias, factor_bias))


def neural_ensemble_pp(index_dim: int = 8, *, sigma: float = 0.01, prior_scale: float = 0.1,
                       posterior_scale: float = 0.1, torso_init: str = "default",
                       factor_init: str = "default", mean_bias: bool = True,
                       factor_bias: bool = True,
                       config: NeuralConfig = DEFAULT_CONFIG) -> Learner:
    """Neural Ensemble++ (arXiv:2407.13195): ``f(x, zeta) = w^T h(x) + s_post <sg(h(x)),
    A zeta + b> + s_prior <sg(h(x)), A_0 zeta>``; 2M "pm" update indices on every sample.

    ``torso_init``, ``factor_init``, ``mean_bias`` and ``factor_bias`` switch the differences
    from the reference code (see :func:`ensemble_pp_model`; the defaults are ours)."""
    model = ensemble_pp_model(index_dim, sigma=sigma, prior_scale=prior_scale,
                              posterior_scale=posterior_scale, hidden=config.hidden,
                              torso_init=torso_init, factor_init=factor_init,
                              mean_bias=mean_bias, factor_bias=factor_bias)
    return make_neural_learner(model, config)


def neural_hyperagent(index_dim: int = 4, *, num_indices: int = 16, sigma: float = 0.01,
                      prior_scale: float = 0.1, posterior_scale: float = 0.1,
                      config: NeuralConfig = DEFAULT_CONFIG) -> Learner:
    """HyperAgent's hypermodel head on an MLP (arXiv:2402.10228): ``f(x, xi) = s_post
    <phi_theta(x), A xi + b> + s_prior <phi_0(x), A_0 xi>``, xi ~ Unif(S^{M-1}).

    For bandits the regulariser is the shared ``lambda/|D| ||theta||^2`` on all trainable
    parameters (HyperAgent's value loss regularises only ``||A xi + b||^2``). With the unscaled
    sphere index the spread over xi is about 1/sqrt(M) of a posterior's (as in the reference).
    """
    _check_common(index_dim, sigma)
    head = HypermodelHead(1, index_dim, torso=MLPTorso(config.hidden), prior_torso="copy",
                          prior_scale=prior_scale, posterior_scale=posterior_scale)
    dist = make_index("sphere", index_dim)
    model = _indexed_model(make_network(head), dist, _sampled(dist, num_indices), sigma)
    return make_neural_learner(model, config)


def neural_ensemble_plus(num_members: int = 8, *, sigma: float = 0.01, prior_scale: float = 0.1,
                         config: NeuralConfig = DEFAULT_CONFIG) -> Learner:
    """Ensemble+ (Osband et al., NeurIPS 2018): ``f_m(x) + prior_scale p_m(x)``, M members with
    frozen random priors p_m; each gradient step trains every member on every sample (member m's
    target is perturbed by ``sigma z_m``)."""
    _check_common(num_members, sigma, "num_members")
    head = RandomPriorEnsembleHead(1, num_members, widths=config.hidden, prior_scale=prior_scale)
    support = make_index("one_hot", num_members).support()
    model = _indexed_model(make_network(head), make_index("one_hot", num_members),
                           lambda key: support, sigma)
    return make_neural_learner(model, config)


def neural_epinet(index_dim: int = 8, *, num_indices: int = 16, sigma: float = 0.01,
                  prior_scale: float = 0.3, config: NeuralConfig = DEFAULT_CONFIG) -> Learner:
    """Epinet (Osband et al., NeurIPS 2023): ``f(x, z) = mu(x) + sigma_L(sg(phi(x)), x, z) +
    prior_scale sigma_P(sg(phi(x)), x, z)``, z ~ N(0, I_M)."""
    _check_common(index_dim, sigma)
    head = EpinetHead(1, index_dim, torso=MLPTorso(config.hidden), prior_scale=prior_scale)
    dist = make_index("gaussian", index_dim)
    model = _indexed_model(make_network(head), dist, _sampled(dist, num_indices), sigma)
    return make_neural_learner(model, config)


class MeanMLP(nn.Module):
    """``f(x) = w^T h(x) + c`` with h a ReLU MLP: (B, d) -> (B,)."""

    widths: Sequence[int] = (64, 64)

    @nn.compact
    def __call__(self, x: Array) -> Array:
        return nn.Dense(1)(MLPTorso(self.widths)(x))[:, 0]


def _mean_model(widths: Sequence[int], scores: Callable[..., Array]) -> NeuralModel:
    """One MLP trained on the unperturbed squared loss; ``scores(params, extra, key, x)``."""
    module = MeanMLP(tuple(widths))

    def init(key: Array, x: Array) -> dict[str, Any]:
        return {"params": module.init(key, x)["params"], "prior": {}}

    def loss(params, variables, key, batch: Batch, weight_decay: float, num_data: Array):
        del variables, key
        pred = module.apply({"params": params}, batch.x)[:, None]
        return perturbed_regression_loss(pred, batch.reward, params=params,
                                         weight_decay=weight_decay, num_data=num_data,
                                         mask=batch.mask)

    return NeuralModel(init, lambda v, e, k, x: scores(v["params"], e, k, x), loss)


def _grad_features(module: MeanMLP, params: Any, x: Array) -> Array:
    """g(x_k) = grad_theta f(x_k; theta), flattened: (K, d) -> (K, num_params)."""
    grads = jax.vmap(jax.grad(lambda p, xk: module.apply({"params": p}, xk[None])[0]),
                     in_axes=(None, 0))(params, x)
    return jnp.concatenate([g.reshape(x.shape[0], -1) for g in jax.tree.leaves(grads)], axis=1)


def _gradient_model(widths: Sequence[int], ridge: float, nu: float, sample: bool) -> NeuralModel:
    module = MeanMLP(tuple(widths))
    m = float(widths[-1])

    def scores(params, diag, key: Array, x: Array) -> Array:
        g = _grad_features(module, params, x)
        width = jnp.sqrt(jnp.sum(jnp.square(g) / (m * diag), axis=1))
        mean = module.apply({"params": params}, x)
        if sample:
            return mean + nu * math.sqrt(ridge) * width * jax.random.normal(key, mean.shape)
        return mean + nu * width

    base = _mean_model(widths, scores)

    def init_extra(variables) -> Array:
        num_params = sum(p.size for p in jax.tree.leaves(variables["params"]))
        return jnp.full((num_params,), ridge, jnp.float32)

    def observe(diag: Array, variables, x: Array) -> Array:
        return diag + jnp.square(_grad_features(module, variables["params"], x[None])[0]) / m

    return base._replace(init_extra=init_extra, observe=observe)


def _gradient_learner(nu: float, ridge: float, config: NeuralConfig, sample: bool) -> Learner:
    """NeuralUCB (``sample=False``) or NeuralTS (``sample=True``) after checking the inputs."""
    check_positive("nu", nu, allow_zero=True)
    check_positive("ridge", ridge)
    check_config(config)
    return make_neural_learner(_gradient_model(config.hidden, ridge, nu, sample=sample), config)


def neural_ucb(*, nu: float = 1.0, ridge: float = 1.0,
               config: NeuralConfig = DEFAULT_CONFIG) -> Learner:
    """NeuralUCB (Zhou et al., ICML 2020), diagonal design matrix (see the module docstring)."""
    return _gradient_learner(nu, ridge, config, sample=False)


def neural_ts(*, nu: float = 1.0, ridge: float = 1.0,
              config: NeuralConfig = DEFAULT_CONFIG) -> Learner:
    """NeuralTS (Zhang et al., ICLR 2021), diagonal design matrix (see the module docstring)."""
    return _gradient_learner(nu, ridge, config, sample=True)


def neural_epsilon_greedy(epsilon: float = 0.1, *,
                          config: NeuralConfig = DEFAULT_CONFIG) -> Learner:
    """Greedy on the MLP's mean; a uniformly random arm with probability ``epsilon``."""
    check_range("epsilon", epsilon, 0.0, 1.0)
    module = MeanMLP(tuple(config.hidden))

    def scores(params, extra, key: Array, x: Array) -> Array:
        del extra
        explore = jax.random.uniform(key) < epsilon
        return jnp.where(explore, 0.0, module.apply({"params": params}, x))

    return make_neural_learner(_mean_model(config.hidden, scores), config)


_FACTORIES: dict[str, Callable[..., Learner]] = {
    "neural_ensemble_pp": neural_ensemble_pp,
    "neural_hyperagent": neural_hyperagent,
    "neural_ensemble_plus": neural_ensemble_plus,
    "neural_epinet": neural_epinet,
    "neural_ucb": neural_ucb,
    "neural_ts": neural_ts,
    "neural_epsilon_greedy": neural_epsilon_greedy,
}
NEURAL_LEARNERS: tuple[str, ...] = tuple(_FACTORIES)
_SCALED = {"neural_ensemble_pp": ("prior_scale", "posterior_scale"),
           "neural_hyperagent": ("prior_scale", "posterior_scale"),
           "neural_ensemble_plus": ("prior_scale",)}


def neural_learner(name: str, game: str = "reference", *, config: NeuralConfig | None = None,
                   **kwargs: Any) -> Learner:
    """Build learner ``name`` (one of :data:`NEURAL_LEARNERS`) with the preset of ``game``.

    The preset's update schedule fills each of ``config.updates_per_step`` and
    ``config.update_every`` (default :class:`NeuralConfig`) still at :class:`NeuralConfig`'s
    default; a value the caller set is kept. Its prior / posterior scales go to the learners
    that have them. ``kwargs`` override the factory's arguments.
    """
    check_choice("name", name, NEURAL_LEARNERS)
    check_choice("game", game, tuple(PRESETS))
    preset = PRESETS[game]
    config = DEFAULT_CONFIG if config is None else config
    config = config._replace(**{
        k: int(preset[k]) for k in ("updates_per_step", "update_every")
        if getattr(config, k) == getattr(DEFAULT_CONFIG, k)})
    scales = {k: float(preset[k]) for k in _SCALED.get(name, ())}
    return _FACTORIES[name](config=config, **{**scales, **kwargs})
