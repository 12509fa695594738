"""Ablation of neural Ensemble++: each difference from the reference code, one at a time.

The reference is szrlee/Ensemble_Plus_Plus (``network/ensemble_exp.py``, ``agent/
nonlinear_sol.py``, ``scripts/run_nonlinear.py``); docs/bandits.md lists every difference
between its neural Ensemble++ and ours. Each variant below starts from ours and switches ONE
difference to the reference's choice (the last switches all of them); every variant runs at the
reference's quadratic preset (prior / posterior scale 5 / 1) and at its default scales
(0.1 / 0.1). The game is the quadratic bandit (Li et al., arXiv:2407.13195; d = 100, 50 of 1000
unit-sphere candidates a round, noise 0.1), T = 1500, 20 seeds (0..19, common random numbers),
Adam 1e-4 with the quadratic preset's 4 gradient steps a round.

Variants (the knobs of :func:`hyperx.bandits.neural.neural_ensemble_pp` and
:func:`hyperx.envs.bandits.quadratic`; all four learner switches were added for this table):

* ``ours``: our defaults;
* ``torso_init=torch``: torso and mean-head kernels and biases ~ U(+-1/sqrt(fan_in)) (torch's
  ``nn.Linear`` default) instead of LeCun-normal kernels and zero biases;
* ``factor_init=xavier``: A ~ N(0, 2 / (M + 64)) (torch ``xavier_normal_``) instead of a
  truncated normal of variance 1/M;
* ``mean_bias=False``: no bias in the mean head (the reference's ``based_out`` has none);
* ``factor_bias=False``: no index-free bias b in the ensemble factor (none in the reference);
* ``shared_instance``: G and the candidate pool drawn once (``instance_seed=2024``) and shared
  by all seeds, as the reference draws them once for all its runs (seeds then differ only in the
  offered arms, the rewards' noise and the learner); NOT paired with ``ours``;
* ``reference``: all five switches together (also not paired);
* ``index_dim=16``, ``index_dim=32``: not a difference (the reference also uses M = 8) but a
  diagnostic: the linear results need M = Theta(d log T) (docs/bandits.md), and the neural
  factor's index spans a 64-wide feature, while Ensemble+ has 8 whole networks.

Not ablated, with the reason (docs/bandits.md): the regulariser's |D| is capped at 10^4 in the
reference and not here, identical for T <= 10^4; argmax ties are broken at random in both; the
classification learner's two logits and cross-entropy concern ``neural_classification``, not
the quadratic game; the other listed items are matched.

Each (variant, scale) cell is written, when it finishes, to
``results/bandit_neural_ablation/<variant>__<prior>_<posterior>.json`` and skipped when already
there with the same settings (benchmarks/bandit_neural.py's :func:`run_cell`), so the run can be
split across sessions. ``results/bandit_neural_ablation.json`` and ``.md`` (the table: mean
final cumulative expected regret +- its normal 95% interval, and the difference from ``ours``
at the same scales: paired over seeds where the game instances are the same, else the
difference of means with both intervals combined) are rebuilt from the cells present.

    python benchmarks/bandit_neural_ablation.py             # 18 cells, T = 1500, 20 seeds
    python benchmarks/bandit_neural_ablation.py --variants ours factor_bias=False
    python benchmarks/bandit_neural_ablation.py --summary   # rebuild the table only
    python benchmarks/bandit_neural_ablation.py --quick     # smoke test (d = 10, T = 60, 2 seeds,
                                                            # results/bandit_neural_ablation_quick/)
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
from bandit_neural import (
    RESULTS,
    check_positive_args,
    first_difference,
    interval,
    run_cell,
    write_json,
)

from hyperx.bandits.neural import neural_learner
from hyperx.bandits.neural_core import NeuralConfig
from hyperx.envs.bandits import make_bandit_env

GAME = "quadratic"
INSTANCE_SEED = 2024
REFERENCE = dict(torso_init="torch", factor_init="xavier", mean_bias=False, factor_bias=False)
VARIANTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # name: (neural_ensemble_pp keyword arguments, quadratic game keyword arguments)
    "ours": ({}, {}),
    "torso_init=torch": (dict(torso_init="torch"), {}),
    "factor_init=xavier": (dict(factor_init="xavier"), {}),
    "mean_bias=False": (dict(mean_bias=False), {}),
    "factor_bias=False": (dict(factor_bias=False), {}),
    "shared_instance": ({}, dict(instance_seed=INSTANCE_SEED)),
    "reference": (REFERENCE, dict(instance_seed=INSTANCE_SEED)),
    # diagnostics beyond the reference (which also uses M = 8): a larger index
    "index_dim=16": (dict(index_dim=16), {}),
    "index_dim=32": (dict(index_dim=32), {}),
}
SCALES = ((5.0, 1.0), (0.1, 0.1))
"""(prior, posterior) scales: the reference's quadratic preset and its default."""


def cell_name(variant: str, scales: tuple[float, float]) -> str:
    return f"{variant}__{scales[0]:g}_{scales[1]:g}"


def settings(args: argparse.Namespace, config: NeuralConfig, variant: str,
             scales: tuple[float, float]) -> dict[str, Any]:
    learner_kw, env_kw = VARIANTS[variant]
    return {"game": GAME, "variant": variant, "learner_kwargs": learner_kw, "env_kwargs": env_kw,
            "prior_scale": scales[0], "posterior_scale": scales[1], "horizon": args.horizon,
            "seeds": args.seeds, "dim": args.dim, "config": config._asdict()}


def difference(row: dict, base: dict, paired: bool) -> tuple[float, float]:
    """Mean of row - base and its 95% half-width (paired over seeds, or combined)."""
    a, b = np.asarray(row["final_per_seed"]), np.asarray(base["final_per_seed"])
    if paired:
        return interval(a - b)
    return float(a.mean() - b.mean()), float(np.hypot(row["final_ci95"], base["final_ci95"]))


def summarise(cells_dir: Path, expected, stem: Path, meta: dict) -> dict:
    """Rebuild ``stem``.json and ``stem``.md from the cells in ``cells_dir`` whose settings equal
    ``expected(variant, scales)``."""
    rows: dict[str, dict[str, dict]] = {}
    skipped = []
    for variant in VARIANTS:
        for scales in SCALES:
            path = cells_dir / f"{cell_name(variant, scales)}.json"
            if not path.exists():
                continue
            cell = json.loads(path.read_text())
            diff = first_difference(cell["settings"], expected(variant, scales))
            if diff is not None:
                skipped.append(f"{path.name}: {diff}")
                continue
            rows.setdefault(variant, {})[f"{scales[0]:g}/{scales[1]:g}"] = cell["result"]
    columns = [f"{p:g}/{q:g}" for p, q in SCALES]
    lines = ["| variant | " + " | ".join(f"prior/posterior {c}: regret (vs ours)" for c in columns)
             + " |", "|---" * (len(columns) + 1) + "|"]
    for variant, by_scale in rows.items():
        cells = []
        for column in columns:
            row, base = by_scale.get(column), rows.get("ours", {}).get(column)
            if row is None:
                cells.append("-")
                continue
            text = f"{row['final_mean']:.1f} +- {row['final_ci95']:.1f}"
            if base is not None and variant != "ours":
                paired = not VARIANTS[variant][1]
                mean, half = difference(row, base, paired)
                text += f" ({mean:+.1f} +- {half:.1f}{'' if paired else ', unpaired'})"
            cells.append(text)
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    missing = [cell_name(v, s) for v in VARIANTS for s in SCALES
               if f"{s[0]:g}/{s[1]:g}" not in rows.get(v, {})]
    write_json(stem.with_suffix(".json"), {"meta": meta, "results": rows, "skipped": skipped,
                                           "missing": missing})
    stem.with_suffix(".md").write_text(
        f"Neural Ensemble++ ablation on the {GAME} game (T = {meta['horizon']}, {meta['seeds']} "
        f"seeds, d = {meta['dim']}): final cumulative expected regret, mean +- 95% interval;\n"
        "in brackets the difference from `ours` at the same scales (paired over seeds unless "
        "marked).\n\n" + table + "\n")
    print(table)
    print(f"-> {stem}.json/.md; missing: {', '.join(missing) or 'none'}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=1500)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: T = 60, 2 seeds, d = 10, a smaller network")
    parser.add_argument("--overwrite", action="store_true",
                        help="rerun cells on disk that were run with other settings")
    parser.add_argument("--summary", action="store_true",
                        help="only rebuild the table from the cells on disk")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    check_positive_args(parser, args, ("horizon", "seeds", "dim"))
    config = NeuralConfig()
    if args.quick:
        args.horizon, args.seeds, args.dim = 60, 2, 10
        config = config._replace(hidden=(16, 16), batch_size=16, learning_starts=16)
    stem = "bandit_neural_ablation" + ("_quick" if args.quick else "")
    cells_dir = args.out / stem
    cells_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    if not args.summary:
        for variant in args.variants:
            learner_kw, env_kw = VARIANTS[variant]
            env = make_bandit_env(GAME, dim=args.dim, **env_kw)
            for prior, post in SCALES:
                make = (lambda kw=learner_kw, p=prior, q=post: neural_learner(  # noqa: E731
                    "neural_ensemble_pp", GAME, config=config, prior_scale=p,
                    posterior_scale=q, **kw))
                run_cell(cells_dir / f"{cell_name(variant, (prior, post))}.json",
                         settings(args, config, variant, (prior, post)), env, make, (),
                         horizon=args.horizon, seeds=args.seeds,
                         label=f"{variant} {prior:g}/{post:g}", overwrite=args.overwrite)
    meta = {"game": GAME, "horizon": args.horizon, "seeds": args.seeds, "dim": args.dim,
            "config": config._asdict(), "variants": {k: list(v) for k, v in VARIANTS.items()},
            "scales": SCALES, "session_s": time.perf_counter() - start, "jax": jax.__version__,
            "platform": platform.platform()}
    summarise(cells_dir, lambda v, s: settings(args, config, v, s), args.out / stem, meta)


if __name__ == "__main__":
    main()
