"""Flax heads that turn an index into a member of a continuous ensemble.

Four heads, each ``head(x, xi)`` over a batched input ``x`` of shape ``(B, ...)``:

* :class:`HypermodelHead` (HyperDQN / HyperFQI / HyperAgent): only the last layer is generated
  from the index,
  ``Q(s, a, xi) = s_post <phi_theta(s), (A xi + b)_a> + s_prior <phi_0(s), (A_0 xi + b_0)_a>``
  (Li et al., HyperDQN, ICLR 2022; Li et al., HyperAgent, ICML 2024, arXiv:2402.10228;
  Dwaracherla et al., Hypermodels for Exploration, ICLR 2020).
* :class:`EnsemblePPHead` (neural Ensemble++, Li et al., arXiv:2407.13195):
  ``f(x, zeta) = w^T h(x) + s_post <sg(h(x)), A zeta + b> + s_prior <sg(h(x)), A_0 zeta>``.
* :class:`EpinetHead` (Osband et al., Epistemic Neural Networks, NeurIPS 2023):
  ``f(x, z) = mu(x) + sigma_L(sg(phi(x)), x, z) + sigma_P(x, z)``.
* :class:`RandomPriorEnsembleHead` (Ensemble+, Osband et al., NeurIPS 2018): M separate
  networks with frozen random priors, mixed by the index (one-hot selects a member).

Index shapes: ``xi`` of shape ``(M,)`` gives outputs ``(B, O)``; ``(K, M)`` (the same K indices
for every input) or ``(B, K, M)`` (K indices per input) give ``(B, K, O)``. So a loss over K
indices per transition is a single call.

Where the frozen parameters live: ``module.init`` returns ``{"params": ..., "prior": ...}``.
Everything that must never train (``A_0``, the prior torso ``phi_0``, the epinet's prior
networks) is in the ``"prior"`` collection, which an optimiser never sees, and the forward pass
applies ``stop_gradient`` to it as well. Train ``variables["params"]`` only:
:func:`trainable_params` and :func:`with_params` do the bookkeeping. Torsos must keep all their
state in ``"params"`` (no batch statistics).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from hyperx._validation import check_choice, check_floating, check_integer, check_rank, check_shape

Array = jax.Array
Variables = dict[str, Any]
PRIOR = "prior"
PRIOR_TORSO_MODES = ("copy", "independent", "shared")
INIT_SCHEMES = ("default", "reference")
BIAS_INITS = ("auto", "xavier")
"""How :class:`IndexedLinear` initialises the generated layer's mean ``b`` (and a frozen prior
bias ``b_0``): ``"auto"`` follows ``init_scheme`` (``b = 0`` and no ``b_0`` by default; sphere
draws for ``"reference"``); ``"xavier"``: ``b`` and a frozen ``b_0`` each Xavier-normal on the
(O, P) matrix, std ``sqrt(2 / (O + P))``, not scaled by ``prior_std`` (the HyperAgent reference's
Atari script, ``--bias-init xavier-uniform``, whose ``"xavier"`` branch draws
``xavier_normal_``).
"""
FEATURE_NORMS = ("none", "minmax")
"""Initialisation schemes of :class:`HypermodelHead` and the MLP torsos.

* ``"default"``: flax's LeCun-normal dense kernels, zero biases; the generated layer ``A`` with
  variance 1/M and ``b = b_0 = 0``.
* ``"reference"``: the HyperAgent reference code (szrlee/HyperAgent, ``run_deepsea.py``
  defaults ``--base-init xavier_normal --hyper-init xavier_normal --prior-init sDB
  --bias-init sphere-sphere``): torso kernels Xavier-normal (Glorot & Bengio, AISTATS 2010;
  std ``sqrt(2 / (fan_in + fan_out))``, untruncated) with zero biases; ``A`` Xavier-normal
  with fan_in = M, fan_out = O P (std ``sqrt(2 / (M + O P))``, 0.12 for M = 4, O = 2,
  P = 64); ``b`` and the frozen ``b_0`` each a uniform draw on the sphere of radius
  ``prior_std`` in R^{O P} (normalised Gaussian); ``A_0`` unit rows times ``prior_std`` (as
  in the default).
"""


def _unit_rows(key: Array, shape: Sequence[int], std: float) -> Array:
    """Gaussian rows (over the last axis) normalised to unit norm, times ``std``."""
    w = jax.random.normal(key, shape, jnp.float32)
    return std * w / jnp.linalg.norm(w, axis=-1, keepdims=True)


def _xavier_normal() -> Callable:
    """Untruncated Xavier/Glorot normal, as ``torch.nn.init.xavier_normal_``."""
    return nn.initializers.variance_scaling(1.0, "fan_avg", "normal")


def _dense_init(init: str) -> Callable:
    check_choice("init_scheme", init, INIT_SCHEMES)
    return _xavier_normal() if init == "reference" else nn.initializers.lecun_normal()


def _sphere(key: Array, shape: Sequence[int], radius: float) -> Array:
    """A uniform draw on the sphere of ``radius`` in R^{prod(shape)}, reshaped to ``shape``."""
    w = jax.random.normal(key, shape, jnp.float32)
    return radius * w / jnp.linalg.norm(w)


def unit_index(xi: Array) -> Array:
    """``xi / ||xi||`` over the last axis (an all-zero index stays zero)."""
    norm = jnp.linalg.norm(xi, axis=-1, keepdims=True)
    return xi / jnp.where(norm > 0, norm, 1.0)


def _check_inputs(x: Array, xi: Array, index_dim: int) -> None:
    """A head's inputs: ``x`` (B, ...) and an index ``xi`` (M,), (K, M) or (B, K, M)."""
    check_rank("x", x, tuple(range(1, 8)))
    batch = x.shape[0]
    check_floating("xi", xi)
    check_rank("xi", xi, (1, 2, 3))
    if xi.ndim == 3:
        check_shape("xi", xi, (batch, None, index_dim), "(B, K, M)")
    else:
        check_shape("xi", xi, (None,) * (xi.ndim - 1) + (index_dim,), "(..., M)")


def _apply_index(t: Array, xi: Array) -> Array:
    """Contract ``t`` of shape (B, O, M) with the index: -> (B, O) or (B, K, O)."""
    if xi.ndim == 1:
        return jnp.einsum("bom,m->bo", t, xi)
    if xi.ndim == 2:
        return jnp.einsum("bom,km->bko", t, xi)
    return _per_input_index(t, xi)


@jax.custom_vjp
def _per_input_index(t: Array, xi: Array) -> Array:
    """``q[b, k, o] = sum_m t[b, o, m] xi[b, k, m]``: K indices per input, (B, O, M) x (B, K, M).

    The forward pass is the einsum (a dot with batch dimension B). Its reverse pass is written
    as elementwise products reduced over k (and o),
    ``dt[b, o, m] = sum_k g[b, k, o] xi[b, k, m]`` and ``dxi[b, k, m] = sum_o g[b, k, o]
    t[b, o, m]``, the same sums autodiff takes, because XLA:CPU runs the transposed batched
    dot of autodiff (B tiny (O, K) x (K, M) products) several times slower (the
    ``loss_forward_backward`` piece of benchmarks/deepsea_throughput.py: HyperAgent's DeepSea
    loss, B = 128, K = 20, M = 4, 64 vmapped seeds). Reverse mode only (``jax.grad``,
    ``jax.vjp``); a ``jax.custom_vjp`` has no forward-mode derivative.
    """
    return jnp.einsum("bom,bkm->bko", t, xi)


def _per_input_index_fwd(t: Array, xi: Array) -> tuple[Array, tuple[Array, Array]]:
    return _per_input_index(t, xi), (t, xi)


def _per_input_index_bwd(residuals: tuple[Array, Array], g: Array) -> tuple[Array, Array]:
    t, xi = residuals
    dt = jnp.sum(g[..., None] * xi[:, :, None, :], axis=1)
    dxi = jnp.sum(g[..., None] * t[:, None], axis=2)
    return dt.astype(t.dtype), dxi.astype(xi.dtype)


_per_input_index.defvjp(_per_input_index_fwd, _per_input_index_bwd)


def _flatten(x: Array) -> Array:
    return jnp.reshape(x, (x.shape[0], -1)).astype(jnp.float32)


class MLPTorso(nn.Module):
    """ReLU MLP on the flattened input: (B, ...) -> (B, widths[-1])."""

    widths: Sequence[int] = (64, 64)
    activate_final: bool = True
    init_scheme: str = "default"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        check_rank("x", x, tuple(range(1, 8)))
        h = _flatten(x)
        for i, width in enumerate(self.widths):
            h = nn.Dense(width, kernel_init=_dense_init(self.init_scheme))(h)
            if self.activate_final or i < len(self.widths) - 1:
                h = nn.relu(h)
        return h


class OneHotMLPTorso(nn.Module):
    """MLP whose first layer reads a compact integer state ``x`` of shape (B,).

    The first layer is ``W[x] + c``: exactly ``Dense`` on ``one_hot(x, num_states)`` (same
    initialisation), at O(1) cost in ``num_states`` instead of O(num_states). For DeepSea
    (Osband et al., bsuite, ICLR 2020) use ``x = row * N + column`` and ``num_states = N * N``.
    Indices outside ``[0, num_states)`` are clipped (a runtime value cannot be checked under jit).
    """

    num_states: int
    widths: Sequence[int] = (64, 64)
    init_scheme: str = "default"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        check_rank("x", x, 1)
        check_integer("x", x)
        width = self.widths[0]
        table = self.param("embedding", _dense_init(self.init_scheme),
                           (self.num_states, width), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros_init(), (width,), jnp.float32)
        h = nn.relu(jnp.take(table, x, axis=0, mode="clip") + bias)
        for w in self.widths[1:]:
            h = nn.relu(nn.Dense(w, kernel_init=_dense_init(self.init_scheme))(h))
        return h


class PatchConv(nn.Module):
    """A VALID, strided 2-D convolution on NHWC input as one matmul over extracted patches.

    ``y[b, i, j] = sum_{u, v, c} x[b, s i + u, s j + v, c] K[u, v, c] + bias``, exactly
    ``flax.linen.Conv(features, (k, k), (s, s), "VALID")`` (same parameters, names and
    initialisers), written as patches and one dot. Why: XLA:CPU runs the gradient of
    ``lax.conv_general_dilated`` inside ``lax.scan`` or ``lax.cond`` much slower than at the
    top level (CleanRL's flax DQN update at batch 32: 288.5 ms in a scan vs 36.4 ms; the same
    update with this form: 30.6 ms vs 32.5 ms; ``python benchmarks/atari_update.py``), and a
    compiled training loop puts every update in a scan.

    Patches: when the stride divides the kernel (``k = m s``, every Nature-CNN layer) the
    input is cut into s x s blocks (one reshape and transpose, "space to depth"), and the
    patches are the ``m * m`` shifted windows of the block grid,
    ``x[s(i+a)+p, s(j+b)+q, c]`` for ``u = s a + p``, ``v = s b + q``, with the kernel's rows
    permuted to match; otherwise ``k * k`` strided slices. The block form makes 4 large
    copies for an 8x8/4 layer where the slices make 64 narrow ones (the narrow copies were
    the largest operations of the update in a profile of the compiled Atari loop; the bare
    update of ``benchmarks/atari_update.py`` does not show the difference).

    ``input_scale``: an integer input (uint8 frames) is sliced as it is, and the patches are
    cast to float32 and multiplied by ``input_scale`` (the same numbers as scaling first:
    slicing commutes with the elementwise cast, and moves a quarter of the bytes).
    """

    features: int
    kernel: int
    stride: int
    kernel_init: Callable = nn.initializers.lecun_normal()
    input_scale: float = 1.0

    @nn.compact
    def __call__(self, x: Array) -> Array:
        check_rank("x", x, 4)
        k, s = self.kernel, self.stride
        batch, height, width, channels = x.shape
        kernel = self.param("kernel", self.kernel_init,
                            (k, k, channels, self.features), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros_init(), (self.features,), jnp.float32)
        out_h, out_w = (height - k) // s + 1, (width - k) // s + 1
        if k % s:
            patches = jnp.concatenate(
                [x[:, u:u + s * (out_h - 1) + 1:s, v:v + s * (out_w - 1) + 1:s, :]
                 for u in range(k) for v in range(k)], axis=-1)
            weights = kernel.reshape(k * k * channels, self.features)
        else:
            m = k // s
            rows, cols = out_h + m - 1, out_w + m - 1
            blocks = x[:, :rows * s, :cols * s, :].reshape(
                batch, rows, s, cols, s, channels).transpose(0, 1, 3, 2, 4, 5).reshape(
                batch, rows, cols, s * s * channels)
            patches = jnp.concatenate([blocks[:, a:a + out_h, b:b + out_w, :]
                                       for a in range(m) for b in range(m)], axis=-1)
            weights = kernel.reshape(m, s, m, s, channels, self.features).transpose(
                0, 2, 1, 3, 4, 5).reshape(k * k * channels, self.features)
        patches = patches.astype(jnp.float32)
        if self.input_scale != 1.0:
            patches = patches * self.input_scale
        return patches @ weights + bias


class NatureCNN(nn.Module):
    """The DQN torso (Mnih et al., Nature 2015): frames (B, 84, 84, 4) -> (B, ``hidden``).

    Conv 32x8x8 stride 4, 64x4x4 stride 2, 64x3x3 stride 1 (ReLU, VALID; :class:`PatchConv`),
    flatten (3136), Linear 3136 -> ``hidden``, ReLU: 512 units in the Nature DQN, 256 in
    HyperAgent's variant (Li et al., ICML 2024). ``channels_first`` reads stacks (B, 4, 84, 84)
    as envpool and ale-py return them. Inputs are cast to float32 and multiplied by
    ``input_scale`` (1/255 for uint8 frames; the HyperAgent reference feeds raw 0-255 values,
    ``input_scale=1``).

    ``feature_norm="minmax"`` rescales each row of the flattened conv features to [0, 1],
    ``(h - min_j h_j) / (max_j h_j - min_j h_j + 1e-8)`` (the HyperAgent reference's
    ``MinMaxNormalization``, before the linear layer); it makes the torso invariant to the
    input's scale at initialisation. ``init_scheme="reference"``: every kernel Xavier-normal,
    as the reference's ``--base-init xavier_normal``; ``"default"``: LeCun-normal.
    """

    input_scale: float = 1.0 / 255.0
    hidden: int = 256
    channels_first: bool = False
    feature_norm: str = "none"
    init_scheme: str = "default"

    @nn.compact
    def __call__(self, x: Array) -> Array:
        check_rank("x", x, 4)
        check_choice("feature_norm", self.feature_norm, FEATURE_NORMS)
        init = _dense_init(self.init_scheme)
        h = jnp.transpose(x, (0, 2, 3, 1)) if self.channels_first else x
        for i, (features, kernel, stride) in enumerate(((32, 8, 4), (64, 4, 2), (64, 3, 1))):
            h = nn.relu(PatchConv(features, kernel, stride, kernel_init=init,
                                  input_scale=1.0 if i else self.input_scale,
                                  name=f"Conv_{i}")(h))
        h = _flatten(h)
        if self.feature_norm == "minmax":
            h = minmax_rows(h)
        return nn.relu(nn.Dense(self.hidden, kernel_init=init)(h))


def minmax_rows(h: Array, eps: float = 1e-8) -> Array:
    """Each row of ``h`` (B, F) mapped affinely onto [0, 1]:
    ``(h - min_j h_j) / (max_j h_j - min_j h_j + eps)``; a constant row maps to 0."""
    check_rank("h", h, 2)
    low = jnp.min(h, axis=-1, keepdims=True)
    high = jnp.max(h, axis=-1, keepdims=True)
    return (h - low) / (high - low + eps)


class IndexedLinear(nn.Module):
    """``s_post <f, (A xi + b)_o> + s_prior <f_0, (A_0 xi + b_0)_o>`` for every output ``o``.

    ``A`` (O, P, M), initialised with variance 1/M, and ``b`` (O, P), initialised to 0, are
    trainable; ``A_0`` (O, P, M) lives in the ``"prior"``
    collection with every row (over M) Gaussian, normalised to unit norm, times ``prior_std``,
    so ``E[A_0 A_0^T] = prior_std^2 I`` per output. ``b_0 = 0``. P is the feature dim d, or d + 1
    when ``bias_coef`` is set: HyperDQN then generates a bias too, the last generated entry
    multiplying the constant ``bias_coef`` (0.01 in Li et al., ICLR 2022).
    ``init_scheme="reference"`` (see :data:`INIT_SCHEMES`): ``A`` Xavier-normal, ``b`` and a frozen
    ``b_0`` (in ``"prior"``) on the sphere of radius ``prior_std`` in R^{O P}.
    ``bias_init="xavier"`` (:data:`BIAS_INITS`): ``b`` and a frozen ``b_0`` Xavier-normal.
    """

    num_outputs: int
    index_dim: int
    prior_std: float = 1.0
    prior_scale: float = 1.0
    posterior_scale: float = 1.0
    bias_coef: float | None = None
    init_scheme: str = "default"
    bias_init: str = "auto"

    @nn.compact
    def __call__(self, feats: Array, prior_feats: Array, xi: Array) -> Array:
        check_choice("bias_init", self.bias_init, BIAS_INITS)
        if self.bias_coef is not None:
            const = jnp.full(feats.shape[:-1] + (1,), self.bias_coef, jnp.float32)
            feats = jnp.concatenate([feats, const], axis=-1)
            prior_feats = jnp.concatenate([prior_feats, const], axis=-1)
        shape = (self.num_outputs, feats.shape[-1], self.index_dim)
        check_choice("init_scheme", self.init_scheme, INIT_SCHEMES)
        reference = self.init_scheme == "reference"
        if reference:  # torch xavier_normal_ on the (O P, M) weight of the hyper layer
            init_a = nn.initializers.variance_scaling(1.0, "fan_avg", "normal", in_axis=-1,
                                                      out_axis=(0, 1))
            init_b = lambda key, shp: _sphere(key, shp, self.prior_std)  # noqa: E731
        else:
            init_a = nn.initializers.variance_scaling(1.0, "fan_in", "truncated_normal",
                                                      in_axis=-1, out_axis=-2, batch_axis=(0,))
            init_b = nn.initializers.zeros_init()
        if self.bias_init == "xavier":
            init_b = _xavier_normal()
        frozen_bias = reference or self.bias_init == "xavier"
        a = self.param("A", init_a, shape)
        b = self.param("b", init_b, shape[:2])
        a0 = self.variable(PRIOR, "A0", lambda: _unit_rows(self.make_rng("params"), shape,
                                                           self.prior_std)).value
        a0 = jax.lax.stop_gradient(a0)
        post_t = jnp.einsum("bp,opm->bom", feats, a)
        prior_t = jnp.einsum("bp,opm->bom", prior_feats, a0)
        bias = feats @ b.T
        prior_bias = None
        if frozen_bias:
            b0 = self.variable(PRIOR, "b0", lambda: init_b(self.make_rng("params"),
                                                           shape[:2])).value
            prior_bias = prior_feats @ jax.lax.stop_gradient(b0).T
        if xi.ndim == 3:
            # K indices per input (the training loss): one contraction of the summed
            # (B, O, M) factors instead of two, s_post <t, xi> + s_prior <t_0, xi> =
            # <s_post t + s_prior t_0, xi>.
            out = _apply_index(self.posterior_scale * post_t + self.prior_scale * prior_t, xi)
            const = self.posterior_scale * bias
            if prior_bias is not None:
                const = const + self.prior_scale * prior_bias
            return out + const[:, None, :]
        post = _apply_index(post_t, xi)
        post = post + (bias if xi.ndim == 1 else bias[:, None, :])
        prior = _apply_index(prior_t, xi)
        if prior_bias is not None:
            prior = prior + (prior_bias if xi.ndim == 1 else prior_bias[:, None, :])
        return self.posterior_scale * post + self.prior_scale * prior


class HypermodelHead(nn.Module):
    """Hypermodel value head: the last layer is generated from the index ``xi``.

    ``Q(s, a, xi) = s_post <phi_theta(s), (A xi + b)_a> + s_prior <phi_0(s), (A_0 xi)_a>``
    (Li et al., HyperAgent, ICML 2024, arXiv:2402.10228; HyperFQI; Li et al., HyperDQN, ICLR
    2022). ``torso=None`` uses ``x`` itself as fixed features (B, d). ``prior_torso`` picks phi_0:

    * ``"copy"``: a frozen copy of phi_theta made at init (HyperAgent / HyperFQI);
    * ``"independent"``: a separately initialised frozen random network (HyperDQN's prior
      network; with ``bias_coef=0.01`` this is HyperDQN's head);
    * ``"shared"``: ``sg(phi_theta(s))`` (no second torso, as the Ensemble++ head).

    ``init_scheme`` picks the generated layer's initialisation (:data:`INIT_SCHEMES`; the torso has
    its own ``init_scheme``); ``"reference"`` adds the frozen prior bias ``b_0``, as does
    ``bias_init="xavier"`` (:data:`BIAS_INITS`). ``normalise_index``: the head reads
    ``xi / ||xi||`` (:func:`unit_index`), so a Gaussian index acts as a uniform one on the
    sphere while the caller keeps the raw draw (the HyperAgent reference's ``noise_norm=1``:
    its perturbation term uses the raw Gaussian index, the network the normalised one).

    Outputs: ``(B, num_outputs)`` for ``xi`` (M,), ``(B, K, num_outputs)`` for (K, M) or (B, K, M).
    """

    num_outputs: int
    index_dim: int
    torso: nn.Module | None = None
    prior_torso: str = "copy"
    prior_std: float = 1.0
    prior_scale: float = 1.0
    posterior_scale: float = 1.0
    bias_coef: float | None = None
    init_scheme: str = "default"
    bias_init: str = "auto"
    normalise_index: bool = False

    @nn.compact
    def __call__(self, x: Array, xi: Array) -> Array:
        check_choice("prior_torso", self.prior_torso, PRIOR_TORSO_MODES)
        _check_inputs(x, xi, self.index_dim)
        if self.normalise_index:
            xi = unit_index(xi)
        if self.torso is None:
            check_rank("x", x, 2)
            check_floating("x", x)
            feats = prior_feats = x.astype(jnp.float32)
        else:
            feats = self.torso(x)
            prior_feats = self._prior_features(x)
        return IndexedLinear(self.num_outputs, self.index_dim, self.prior_std, self.prior_scale,
                             self.posterior_scale, self.bias_coef, self.init_scheme,
                             self.bias_init, name="hyper")(feats, prior_feats, xi)

    def _prior_features(self, x: Array) -> Array:
        if self.prior_torso == "shared":
            return jax.lax.stop_gradient(self.torso(x))
        frozen = self.torso.clone(parent=None)
        if self.prior_torso == "copy":
            init = lambda: self.torso.variables.get("params", {})
        else:
            init = lambda: frozen.init(self.make_rng("params"), x).get("params", {})
        params0 = self.variable(PRIOR, "prior_torso", init).value
        return frozen.apply({"params": jax.lax.stop_gradient(params0)}, x)


class EnsemblePPHead(nn.Module):
    """Neural Ensemble++ head (Li et al., Scalable Exploration via Ensemble++, arXiv:2407.13195).

    ``f(x, zeta) = w^T h(x) + s_post <sg(h(x)), A zeta + b> + s_prior <sg(h(x)), A_0 zeta>``.
    Only the mean head ``w`` trains the features h (the ensemble factor sees them under
    stop-gradient). ``torso=None`` uses ``x`` (B, d) as fixed features; the reference uses
    ``MLPTorso((64, 64))``. Output shapes as :class:`HypermodelHead`.
    """

    num_outputs: int
    index_dim: int
    torso: nn.Module | None = None
    prior_std: float = 1.0
    prior_scale: float = 0.1
    posterior_scale: float = 0.1

    @nn.compact
    def __call__(self, x: Array, zeta: Array) -> Array:
        _check_inputs(x, zeta, self.index_dim)
        h = _flatten(x) if self.torso is None else self.torso(x)
        mean = nn.Dense(self.num_outputs, name="mean")(h)
        sg = jax.lax.stop_gradient(h)
        spread = IndexedLinear(self.num_outputs, self.index_dim, self.prior_std,
                               self.prior_scale, self.posterior_scale, name="hyper")(sg, sg, zeta)
        return spread + (mean if zeta.ndim == 1 else mean[:, None, :])


class EpinetHead(nn.Module):
    """Epinet (Osband et al., Epistemic Neural Networks, NeurIPS 2023).

    ``f(x, z) = mu(x) + sigma_L(sg(phi(x)), x, z) + prior_scale * sigma_P(sg(phi(x)), x, z)``:
    ``mu = Dense(phi(x))``; ``sigma_L`` a trainable MLP (``hiddens``) on ``[sg(phi(x)), x]``
    whose (O, M) output is contracted with z; ``sigma_P`` an ensemble of M frozen random MLPs
    (``prior_hiddens``, in the ``"prior"`` collection) on the same input, ``sum_m z_m g_m(.)``.
    ``include_inputs=False`` drops the raw ``x`` from the epinet input (e.g. integer states).
    Index ``z ~ N(0, I_8)`` in the reference; output shapes as :class:`HypermodelHead`.
    """

    num_outputs: int
    index_dim: int = 8
    torso: nn.Module | None = None
    hiddens: Sequence[int] = (15, 15)
    prior_hiddens: Sequence[int] = (15, 15)
    prior_scale: float = 0.3
    include_inputs: bool = True

    @nn.compact
    def __call__(self, x: Array, z: Array) -> Array:
        _check_inputs(x, z, self.index_dim)
        h = _flatten(x) if self.torso is None else self.torso(x)
        mean = nn.Dense(self.num_outputs, name="mean")(h)
        inp = jax.lax.stop_gradient(h)
        if self.include_inputs and self.torso is not None:
            inp = jnp.concatenate([inp, _flatten(x)], axis=-1)
        learned = MLPTorso(tuple(self.hiddens) + (self.num_outputs * self.index_dim,),
                           activate_final=False, name="epinet")(inp)
        learned = _apply_index(learned.reshape(-1, self.num_outputs, self.index_dim), z)
        prior = _apply_index(self._prior_ensemble(inp), z)
        return learned + self.prior_scale * prior + (mean if z.ndim == 1 else mean[:, None, :])

    def _prior_ensemble(self, inp: Array) -> Array:
        """M frozen MLPs (stacked weights): (B, F) -> (B, O, M)."""
        widths = (inp.shape[-1], *self.prior_hiddens, self.num_outputs)
        init = nn.initializers.lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(0,))

        def make() -> list[Array]:
            keys = jax.random.split(self.make_rng("params"), len(widths) - 1)
            return [init(k, (self.index_dim, i, o), jnp.float32)
                    for k, i, o in zip(keys, widths[:-1], widths[1:], strict=True)]

        kernels = jax.lax.stop_gradient(self.variable(PRIOR, "prior_mlp", make).value)
        h = jnp.broadcast_to(inp[:, None, :], (inp.shape[0], self.index_dim, inp.shape[-1]))
        for i, kernel in enumerate(kernels):
            h = jnp.einsum("bmi,mio->bmo", h, kernel)
            if i < len(kernels) - 1:
                h = nn.relu(h)
        return jnp.swapaxes(h, 1, 2)


class RandomPriorEnsembleHead(nn.Module):
    """Ensemble+ with randomized priors (Osband et al., NeurIPS 2018; bsuite's boot_dqn).

    ``f(x, xi) = sum_m xi_m (f_m(x) + prior_scale * p_m(x))`` over ``index_dim`` members, each an
    MLP (``widths``, then a linear output) with its own frozen random prior MLP ``p_m`` (in the
    ``"prior"`` collection). A one-hot index ``e_m`` selects member m; members share nothing.
    Output shapes as :class:`HypermodelHead`.
    """

    num_outputs: int
    index_dim: int
    widths: Sequence[int] = (50, 50)
    prior_scale: float = 5.0

    @nn.compact
    def __call__(self, x: Array, xi: Array) -> Array:
        _check_inputs(x, xi, self.index_dim)
        members = nn.vmap(MLPTorso, variable_axes={"params": 0}, split_rngs={"params": True},
                          in_axes=None, out_axes=2, axis_size=self.index_dim)
        widths = (*self.widths, self.num_outputs)
        out = members(widths, activate_final=False, name="members")(x)
        frozen = members(widths, activate_final=False, parent=None)
        params0 = self.variable(PRIOR, "prior_members",
                                lambda: frozen.init(self.make_rng("params"), x)["params"]).value
        prior = frozen.apply({"params": jax.lax.stop_gradient(params0)}, x)
        return _apply_index(out + self.prior_scale * prior, xi)


class Network(NamedTuple):
    """A head as two pure functions (optax style).

    ``init(key, x, xi) -> {"params": trainable, "prior": frozen}``;
    ``apply(variables, x, xi) -> outputs``.
    """

    init: Callable[[Array, Array, Array], Variables]
    apply: Callable[[Variables, Array, Array], Array]


def make_network(module: nn.Module) -> Network:
    """Wrap a head module; the returned variables always hold both collections."""

    def init(key: Array, x: Array, xi: Array) -> Variables:
        variables = module.init(key, x, xi)
        return {"params": variables["params"], PRIOR: variables.get(PRIOR, {})}

    return Network(init, module.apply)


def trainable_params(variables: Variables) -> Any:
    """The parameters an optimiser may update (the ``"params"`` collection)."""
    return variables["params"]


def with_params(variables: Variables, params: Any) -> Variables:
    """New variables with trainable ``params`` replaced and the frozen prior kept as is."""
    return {**variables, "params": params}


def generated_sq_norm(params: Any, xi: Array) -> Array:
    """``||A xi + b||^2`` of the generated last layer, per index: ``xi`` (..., M) -> (...).

    ``params`` is the trainable collection of a :class:`HypermodelHead` or
    :class:`EnsemblePPHead`. This is the regulariser of the perturbed value loss (Li et al.,
    HyperAgent, ICML 2024; HyperDQN's l2 on the generated weights).
    """
    if "hyper" not in params:
        raise ValueError("params: expected the params of a HypermodelHead or EnsemblePPHead "
                         f"(a 'hyper' entry), got keys {sorted(params)}")
    a, b = params["hyper"]["A"], params["hyper"]["b"]
    check_floating("xi", xi)
    check_shape("xi", xi, (None,) * (jnp.ndim(xi) - 1) + (a.shape[-1],), "(..., M)")
    generated = jnp.einsum("opm,...m->...op", a, xi) + b
    return jnp.sum(jnp.square(generated), axis=(-2, -1))
