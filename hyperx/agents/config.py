"""Frozen configurations of the ONE value-based agent core (:mod:`hyperx.agents.core`).

HyperAgent (Li et al., ICML 2024, arXiv:2402.10228), HyperFQI (Li et al.) and HyperDQN (Li et
al., ICLR 2022) differ only in knobs of one machinery: the index distribution and width M, how
many indices the loss averages over, the perturbation sigma, the regulariser, the n-step
horizon, double-Q, per-step index redraw and optimistic index sampling (OIS). The baselines are
the same core too:

* ``dqn`` (bsuite's dqn; Mnih et al., Nature 2015): a one-hot index of width M = 1 is a constant
  index, so the hypermodel head is an ordinary linear Q head; no prior (``prior_scale=0``), no
  perturbation, epsilon-greedy.
* ``ensemble_plus`` (bsuite's boot_dqn, Ensemble+; Osband et al., NeurIPS 2018): a one-hot
  index of width 20 selects one of 20 members of the generated last layer, each with a frozen
  prior scaled by 5; the loss averages over all members; a member is drawn per episode.
* ``epinet_dqn`` (Osband et al., Epistemic Neural Networks, NeurIPS 2023): the epinet head
  with a Gaussian index of width 8.

Use :func:`get_config` (``get_config("hyperagent", env="deepsea")``); override any field with
keyword arguments.
"""

from __future__ import annotations

import dataclasses

from hyperx._validation import check_choice, check_flag, check_int, check_positive, check_range
from hyperx.heads import BIAS_INITS, FEATURE_NORMS, INIT_SCHEMES
from hyperx.index import INDEX_NAMES

HEADS = ("hypermodel", "epinet")
TORSOS = ("mlp", "nature_cnn")
UPDATE_INDEX_MODES = ("sample", "support")
TARGET_INDEX_MODES = ("same", "fresh")
ENVS = ("deepsea", "atari")


@dataclasses.dataclass(frozen=True)
class AgentConfig:
    """Every knob of the value-based agent core (hashable, so programs can be cached on it).

    Network: ``head`` (hypermodel or epinet), ``torso`` (an MLP of ``torso_widths``, or the
    Nature CNN), index family ``index`` of width ``index_dim``, ``prior_std``, ``prior_scale``,
    ``posterior_scale``, ``bias_coef`` (HyperDQN's generated bias) and ``prior_torso``
    (see :class:`hyperx.heads.HypermodelHead`); ``init_scheme`` (``"default"`` or the
    HyperAgent reference code's ``"reference"``, :data:`hyperx.heads.INIT_SCHEMES`) for the
    torso and the generated layer; ``bias_init`` for the generated layer's mean and frozen
    prior bias (:data:`hyperx.heads.BIAS_INITS`); ``normalise_index`` (the head reads
    ``xi / ||xi||``, the perturbation the raw ``xi``); for the Nature CNN ``input_scale``
    (1/255, or 1 for raw frames) and ``feature_norm`` (``"minmax"``: each row of the conv
    features onto [0, 1]); ``epinet_hiddens`` for the epinet.

    Loss (:func:`hyperx.losses.perturbed_value_loss`): ``num_indices`` K per transition, drawn
    per transition (``update_index="sample"``) or the whole support of an enumerable index
    (``"support"``); bootstrap indices the ``"same"`` K or one ``"fresh"`` index per
    transition (``target_index``); ``sigma``, ``beta`` (divided by |D|), ``l2``,
    ``double_q``, ``n_step``, ``gamma``; ``grad_penalty`` times ``||d/dtheta mean Q||^2``
    (:func:`hyperx.losses.grad_sq_norm_with_output`).

    Optimisation: Adam(``learning_rate``, ``adam_eps``) after global-norm clipping at
    ``max_grad_norm`` (``None``: no clipping); ``batch_size``; ``updates_per_step`` gradient
    steps every ``update_every`` env steps once ``learning_starts`` transitions are stored;
    target sync every ``target_update_period`` gradient steps; replay of ``buffer_size``.

    Acting: uniformly random actions for the first ``random_start`` env steps (counted as
    ``learning_starts`` is), then one index per episode, redrawn at each step with
    probability ``redraw_prob``
    (HyperAgent: 1 - gamma); OIS acts on the ``ois_quantile`` of ``ois_num_indices`` indices
    (and uses it in the target); epsilon-greedy annealed linearly from ``epsilon_start`` to
    ``epsilon_end`` over ``epsilon_decay_steps`` env steps (0 steps: fixed ``epsilon_end``).
    Evaluation: greedy on a fresh index per game, or epsilon-greedy with ``eval_epsilon``
    (Nature DQN 0.05; Dopamine's Atari-100k configs 0.001): a greedy policy that never presses
    FIRE after a lost life idles until the step cap.
    """

    name: str
    head: str = "hypermodel"
    torso: str = "mlp"
    torso_widths: tuple[int, ...] = (64, 64)
    index: str = "sphere"
    index_dim: int = 4
    prior_std: float = 1.0
    prior_scale: float = 10.0
    posterior_scale: float = 1.0
    bias_coef: float | None = None
    prior_torso: str = "copy"
    init_scheme: str = "default"
    bias_init: str = "auto"
    normalise_index: bool = False
    input_scale: float = 1.0 / 255.0
    feature_norm: str = "none"
    epinet_hiddens: tuple[int, ...] = (15, 15)
    num_indices: int = 20
    update_index: str = "sample"
    target_index: str = "fresh"
    sigma: float = 0.0
    beta: float = 0.0
    l2: float = 0.0
    grad_penalty: float = 0.0
    double_q: bool = True
    n_step: int = 1
    gamma: float = 0.99
    learning_rate: float = 1e-3
    adam_eps: float = 1e-8
    max_grad_norm: float | None = None
    batch_size: int = 128
    updates_per_step: int = 1
    update_every: int = 1
    target_update_period: int = 4
    buffer_size: int = 1_000_000
    learning_starts: int = 128
    random_start: int = 0
    redraw_prob: float = 0.0
    ois_quantile: float | None = None
    ois_num_indices: int = 1
    epsilon_start: float = 0.0
    epsilon_end: float = 0.0
    epsilon_decay_steps: int = 0
    eval_epsilon: float = 0.0

    def __post_init__(self) -> None:
        check_choice("head", self.head, HEADS)
        check_choice("torso", self.torso, TORSOS)
        check_choice("index", self.index, INDEX_NAMES)
        check_choice("update_index", self.update_index, UPDATE_INDEX_MODES)
        check_choice("target_index", self.target_index, TARGET_INDEX_MODES)
        check_choice("init_scheme", self.init_scheme, INIT_SCHEMES)
        check_choice("bias_init", self.bias_init, BIAS_INITS)
        check_choice("feature_norm", self.feature_norm, FEATURE_NORMS)
        check_flag("normalise_index", self.normalise_index)
        check_flag("double_q", self.double_q)
        for name in ("index_dim", "num_indices", "n_step", "batch_size", "updates_per_step",
                     "update_every", "target_update_period", "buffer_size", "ois_num_indices"):
            check_int(name, getattr(self, name))
        for name in ("learning_starts", "random_start", "epsilon_decay_steps"):
            check_int(name, getattr(self, name), low=0)
        for name in ("torso_widths", "epinet_hiddens"):
            widths = getattr(self, name)
            if not isinstance(widths, tuple | list) or not widths:
                raise ValueError(f"{name}: expected a non-empty tuple of layer widths such as "
                                 f"(64, 64), got {widths!r}")
            for width in widths:
                check_int(name, width)
            object.__setattr__(self, name, tuple(widths))  # hashable: programs cache on it
        for name in ("sigma", "beta", "l2", "grad_penalty", "prior_std", "prior_scale"):
            check_positive(name, getattr(self, name), allow_zero=True)
        for name in ("learning_rate", "adam_eps", "posterior_scale", "input_scale"):
            check_positive(name, getattr(self, name))
        for name in ("max_grad_norm", "bias_coef"):
            if getattr(self, name) is not None:
                check_positive(name, getattr(self, name))
        for name in ("gamma", "redraw_prob", "epsilon_start", "epsilon_end", "eval_epsilon"):
            check_range(name, getattr(self, name), 0.0, 1.0)
        if self.ois_quantile is not None:
            check_range("ois_quantile", self.ois_quantile, 0.0, 1.0)
        if self.head == "epinet" and (self.beta > 0 or self.l2 > 0):
            raise ValueError("beta, l2: the epinet head has no generated layer to regularise; "
                             "expected beta = l2 = 0")
        if self.head == "epinet" and (self.normalise_index or self.bias_init != "auto"):
            raise ValueError("normalise_index, bias_init: options of the hypermodel head; "
                             "expected normalise_index=False, bias_init='auto' for the epinet")


_DEEPSEA_HYPERAGENT = AgentConfig(name="hyperagent", redraw_prob=0.01)
_ATARI_HYPER = dict(torso="nature_cnn", torso_widths=(256,), sigma=0.01, beta=0.01,
                    prior_std=0.1, prior_scale=0.1, posterior_scale=0.1, learning_rate=1e-4,
                    adam_eps=1.5e-4, batch_size=32, max_grad_norm=10.0, n_step=5,
                    target_update_period=5, buffer_size=100_000, learning_starts=2000)
_ATARI_NATURE = dict(torso="nature_cnn", learning_rate=1e-4, adam_eps=1.5e-4, batch_size=32,
                     max_grad_norm=10.0, n_step=3, target_update_period=2000, update_every=4,
                     buffer_size=100_000, learning_starts=2000)

_CONFIGS: dict[tuple[str, str], AgentConfig] = {
    # The HyperAgent reference's run_deepsea.py defaults (szrlee/HyperAgent; docs/deepsea.md,
    # "Parity with the reference code"): Xavier-normal torso and generated layer, sphere
    # biases b and b_0, an independently initialised prior torso, Adam eps 1.5e-4, clip 10.
    ("hyperagent", "deepsea"): dataclasses.replace(
        _DEEPSEA_HYPERAGENT, init_scheme="reference", prior_torso="independent",
        adam_eps=1.5e-4, max_grad_norm=10.0),
    # The HyperFQI reference's DeepSea script keeps its run_deepsea.py defaults: n-step 1 (not
    # the 10 of its Atari runs; with n = 10 we measured 1/5 seeds learning N = 10 and 0/5 N = 20),
    # Gaussian index, target noise 1e-4, Adam eps 1.5e-4, gradient-norm clip 10.
    ("hyperfqi", "deepsea"): dataclasses.replace(
        _DEEPSEA_HYPERAGENT, name="hyperfqi", n_step=1, index="gaussian", sigma=1e-4,
        redraw_prob=0.0, adam_eps=1.5e-4, max_grad_norm=10.0),
    ("hyperdqn", "deepsea"): AgentConfig(
        name="hyperdqn", index_dim=2, bias_coef=0.01, prior_torso="independent",
        target_index="same", double_q=False),
    ("dqn", "deepsea"): AgentConfig(
        name="dqn", torso_widths=(50, 50), index="one_hot", index_dim=1, prior_scale=0.0,
        prior_torso="shared", num_indices=1, target_index="same", double_q=False,
        batch_size=32, buffer_size=10_000, learning_starts=100, epsilon_start=0.05,
        epsilon_end=0.05),
    ("ensemble_plus", "deepsea"): AgentConfig(
        name="ensemble_plus", torso_widths=(50, 50), index="one_hot", index_dim=20,
        prior_scale=5.0, prior_torso="independent", num_indices=20, update_index="support",
        target_index="same", double_q=False, buffer_size=10_000),
    ("epinet_dqn", "deepsea"): AgentConfig(
        name="epinet_dqn", head="epinet", torso_widths=(50, 50), index="gaussian",
        index_dim=8, prior_scale=0.3, target_index="same", double_q=False, batch_size=32,
        buffer_size=10_000, learning_starts=100),
    # The HyperAgent reference's run_atari.py as run_HyperAgent.sh calls it (docs/atari.md,
    # "Parity with the reference code"): 2000 uniformly random steps, raw 0-255 input, MinMax
    # conv features, Xavier-normal torso and hyper layer, Xavier-normal b and frozen b_0, an
    # independent frozen prior torso, a Gaussian index normalised inside the network (the
    # perturbation uses the raw draw), the gradient-norm penalty 0.01.
    ("hyperagent", "atari"): AgentConfig(
        name="hyperagent", redraw_prob=0.01, index="gaussian", normalise_index=True,
        init_scheme="reference", bias_init="xavier", prior_torso="independent",
        input_scale=1.0, feature_norm="minmax", grad_penalty=0.01, random_start=2000,
        **_ATARI_HYPER),
    ("hyperfqi", "atari"): AgentConfig(name="hyperfqi", index="gaussian",
                                       **{**_ATARI_HYPER, "n_step": 10}),
    ("hyperdqn", "atari"): AgentConfig(
        name="hyperdqn", torso="nature_cnn", torso_widths=(256,), index="gaussian",
        index_dim=32, num_indices=10, target_index="same", sigma=0.01, l2=0.01,
        bias_coef=0.01, prior_torso="independent", prior_std=1.0, prior_scale=0.1,
        posterior_scale=0.1, learning_rate=1e-4, adam_eps=1.5e-4, batch_size=32, n_step=3,
        target_update_period=2500, update_every=4, buffer_size=1_000_000,
        learning_starts=50_000, double_q=False),
    ("dqn", "atari"): AgentConfig(
        name="dqn", torso_widths=(512,), index="one_hot", index_dim=1, prior_scale=0.0,
        prior_torso="shared", num_indices=1, target_index="same", double_q=True,
        epsilon_start=1.0, epsilon_end=0.01, epsilon_decay_steps=250_000, eval_epsilon=0.05,
        **_ATARI_NATURE),
    ("ensemble_plus", "atari"): AgentConfig(
        name="ensemble_plus", torso_widths=(256,), index="one_hot", index_dim=10,
        num_indices=10, update_index="support", target_index="same", prior_scale=0.1,
        posterior_scale=1.0, prior_torso="independent", **_ATARI_NATURE),
    # Ensemble+ (Osband et al. 2018) and the epinet DQN (Osband et al. 2023, DQN-Zoo settings)
    # keep Nature DQN's one update per 4 env steps; HyperAgent and HyperFQI update every step.
    ("epinet_dqn", "atari"): AgentConfig(
        name="epinet_dqn", head="epinet", torso_widths=(256,), index="gaussian", index_dim=8,
        prior_scale=0.3, target_index="same", **_ATARI_NATURE),
}
for _env in ENVS:
    _CONFIGS[("hyperfqi_oh", _env)] = dataclasses.replace(
        _CONFIGS[("hyperfqi", _env)], name="hyperfqi_oh", index="one_hot", num_indices=4,
        update_index="support")
    _CONFIGS[("hyperfqi_ois", _env)] = dataclasses.replace(
        _CONFIGS[("hyperfqi", _env)], name="hyperfqi_ois", ois_quantile=0.8, ois_num_indices=5)

DQN_100K: dict = dict(n_step=10, update_every=1, target_update_period=1, learning_starts=1600,
                      epsilon_start=1.0, epsilon_end=0.01, epsilon_decay_steps=5000,
                      eval_epsilon=0.001)
"""Overrides that make the Atari ``dqn`` config the data-efficient DQN of the Atari-100k
literature, the settings of Dopamine's ``labs/atari_100k/configs/DrQ_eps.gin`` (DrQ(eps),
Agarwal et al., NeurIPS 2021): n-step 10, one update per env step, the target synced every
update, 1600 warm-up steps, epsilon 1 -> 0.01 over 5000 steps, evaluation epsilon 0.001.
Kept from ``dqn``: Adam 1e-4 / eps 1.5e-4 (the same as Dopamine's), double Q, batch 32, the
Nature CNN with a linear head, global-norm clip 10 (Dopamine: none). Not included: DrQ's image
augmentation and the dueling head.
``get_config("dqn", env="atari", **DQN_100K)``."""

_CONFIGS[("dqn_100k", "atari")] = dataclasses.replace(_CONFIGS[("dqn", "atari")],
                                                     name="dqn_100k", **DQN_100K)

AGENT_NAMES: tuple[str, ...] = ("hyperagent", "hyperfqi", "hyperfqi_oh", "hyperfqi_ois",
                                "hyperdqn", "dqn", "ensemble_plus", "epinet_dqn")
"""The configs every environment has."""
ATARI_AGENT_NAMES: tuple[str, ...] = (*AGENT_NAMES, "dqn_100k")
"""The Atari configs: :data:`AGENT_NAMES` and ``dqn_100k`` (``dqn`` with :data:`DQN_100K`)."""


def get_config(name: str, env: str = "deepsea", **overrides) -> AgentConfig:
    """The named configuration with the published defaults for ``env`` (deepsea or atari).

    DeepSea defaults follow the reference code (HyperAgent: MLP 64x2, M=4 sphere, 20 indices,
    prior scale 10, lr 1e-3, batch 128, target every 4, start at 128) and bsuite's own baselines;
    Atari defaults follow the papers (HyperAgent: M=4, sigma = beta = 0.01, n-step 5, target
    every 5 gradient steps; HyperDQN: M=32, 10 indices, n-step 3, one update every 4 steps).
    Keyword ``overrides`` replace fields, e.g. ``get_config("dqn", epsilon_start=1.0)``.
    """
    check_choice("env", env, ENVS)
    check_choice("name", name, ATARI_AGENT_NAMES if env == "atari" else AGENT_NAMES)
    return dataclasses.replace(_CONFIGS[(name, env)], **overrides)
