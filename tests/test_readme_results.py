"""The results in README.md and docs/results.md equal the files in benchmarks/results/.

docs/results.md holds every benchmark result with its command; README.md holds one table row
per headline result. Each expected phrase is formatted here from a results file and must appear
on its page (whitespace normalised), so a change that moves a result cannot leave a page stale:
the phrases of docs/results.md are checked there, and every row of the README's results table
is one phrase formatted here (its first column holds no number). DeepSea per-seed lists are
written in one form, ``agent N = n: e1, e2, ... (k/s)``; every such mention on either page is
checked against its cell file in benchmarks/results/deepsea_scaling/.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


README = ROOT / "README.md"
RESULTS_PAGE = ROOT / "docs" / "results.md"


def _text(page: Path) -> str:
    return " ".join(page.read_text().split())


def _readme() -> str:
    return _text(README)


def _load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def _smallest_m_phrase(by_index: dict[str, int]) -> str:
    """{"gaussian": 16, "one_hot": 64} -> "16 (gaussian) and 64 (one_hot)"."""
    groups: dict[int, list[str]] = {}
    for index, m in by_index.items():
        groups.setdefault(m, []).append(index)
    parts = [f"{m} ({', '.join(names)})" for m, names in sorted(groups.items())]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _bandit_phrases() -> list[str]:
    size = _load("bandit_ensemble_size.json")
    d50, d100, ref = size["cells"]["d50_k1000"], size["cells"]["d100_k10000"], size["reference"]

    def ms(cell: dict) -> str:
        return f"{cell['mean']:.0f} +- {cell['sd']:.0f}"

    phrases = [f"| exact TS | {ms(d50['exact_ts'])} | {ref['exact_ts'][0]:.0f} +- "
               f"{ref['exact_ts'][1]:.0f} |", f"| LinUCB (alpha = 2.36) | {ms(d50['linucb'])} |"]
    for m in (4, 16, 32, 64):
        row = f"| Ensemble++ gaussian M = {m} | {ms(d50[f'ensemble_pp:gaussian:M={m}'])} |"
        if str(m) in ref["ensemble_pp_gaussian"]:
            r = ref["ensemble_pp_gaussian"][str(m)]
            row += f" {r[0]:.0f} +- {r[1]:.0f} |"
        phrases.append(row)
    means = ", ".join(f"{d100[f'ensemble_pp:gaussian:M={m}']['mean']:.0f}" for m in (8, 16, 32, 64))
    phrases.append(f"exact TS has {ms(d100['exact_ts'])}; Ensemble++ gaussian M = 8, 16, 32, 64: "
                   f"{means}")
    for key in ("d50_k1000", "d100_k10000"):
        phrases.append("smallest M within 10% of exact TS is "
                       + _smallest_m_phrase(size["smallest_m_within_10pct"][key]))

    neural = _load("bandit_neural.json")
    for game, rank in neural["ranking"].items():
        rows, best = neural["results"][game], rank["best"]
        horizon = neural["meta"]["horizon"][game]
        ours = rank["paired_difference_from_best"]["neural_ensemble_pp"]
        phrases.append(f"on `{game}` (T = {horizon}) the best is `{best}` at "
                       f"{rows[best]['final_mean']:.1f} +- {rows[best]['final_ci95']:.1f} and "
                       f"neural Ensemble++ is {ours['mean']:.1f} +- {ours['ci95']:.1f} behind it")
    uniform = neural["results"]["neural_classification"]["uniform"]["final_mean"]
    phrases.append(f"uniform play at {uniform:.1f}")
    speed = _load("bandit_neural_throughput.json")["results"]["quadratic"]
    pp, plus = speed["neural_ensemble_pp"], speed["neural_ensemble_plus"]
    ratios = [pp[s]["seed_rounds_per_s"] / plus[s]["seed_rounds_per_s"] for s in pp]
    phrases.append(f"it runs {min(ratios):.1f}-{max(ratios):.1f}x the seed-rounds per second of "
                   "Ensemble+")

    rows = _load("bandit_throughput.json")["rows"]

    def span(size: str, key: str, fmt: str, scale: float = 1.0) -> str:
        vals = sorted(r[key] * scale for r in rows if r["size"] == size)
        return f"{vals[0]:{fmt}}-{vals[-1]:{fmt}}"

    phrases += [
        f"K = 1000, {span('d50_k1000', 'jax_seed_steps_per_s', '.0f', 1e-3).replace('-', 'k-')}k "
        "seed-rounds/s",
        f"({span('d50_k1000', 'speedup_vs_numpy', '.1f')}x a per-seed NumPy loop",
        f"{span('d50_k1000', 'fraction_of_floor', '.0f', 100)}% of the DRAM-bandwidth floor",
        f"run {span('d100_k10000', 'jax_seed_steps_per_s', '.1f', 1e-3).replace('-', 'k-')}k "
        "seed-rounds/s",
        f"{span('d100_k10000', 'groups_vs_one_pass', '.1f')}x one pass over all 200 seeds",
        f"{span('d100_k10000', 'fraction_of_floor', '.0f', 100)}% of the floor",
        f"within {span('d100_k10000', 'speedup_vs_numpy', '.1f')}x of it there",
    ]
    return phrases


def _deepsea_phrases() -> list[str]:
    throughput = _load("deepsea_throughput.json")
    (row,) = [r for r in throughput["rows"] if r["driver"] == "scan" and r["seeds"] == 64]
    reference = _load("deepsea_reference.json")["median"]
    return [f"{row['env_steps_per_s']:,.0f} env steps/s summed over 64 vmapped seeds, "
            f"{throughput['scan_over_loop']['64']:.1f}x a Python loop",
            f"median {reference['30']} at N = 30 and {reference['40']} at N = 40"]


def _atari_phrases() -> list[str]:
    summary = _load("atari_throughput.json")["summary"]
    ha, dqn = summary["hyperagent"], summary["dqn"]
    rows = [r for r in _load("atari_throughput.json")["rows"]
            if r["agent"] == "dqn" and r.get("grid")]
    learning = _load("atari_learning.json")
    last = learning["agents"]["dqn"]["training_last_fifth"]
    last_ha = learning["agents"]["hyperagent"]["training_last_fifth"]
    finals = [learning["agents"][a]["final_eval"]["mean"] for a in ("dqn", "hyperagent")]
    random = learning["random_policy"]

    def interval(x: dict) -> str:
        return f"{x['mean']:.2f} [{x['ci95'][0]:.2f}, {x['ci95'][1]:.2f}]"

    return [
        f"trains hyperagent at {ha['compiled_env_steps_per_s']:.1f} env steps/s and dqn at "
        f"{dqn['compiled_env_steps_per_s']:.1f}, {ha['ratio_compiled_to_python_loop']:.2f}x and "
        f"{dqn['ratio_compiled_to_python_loop']:.2f}x the same",
        f"({ha['python_loop_env_steps_per_s']:.1f} and "
        f"{dqn['python_loop_env_steps_per_s']:.1f} env",
        f"costs {ha['update_in_loop_s'] * 1e3:.1f} and {dqn['update_in_loop_s'] * 1e3:.1f} ms "
        f"({ha['update_s'] * 1e3:.1f} and {dqn['update_s'] * 1e3:.1f} ms as a top-level jitted",
        f"at {ha['fraction_of_update_bound']:.2f} and {dqn['fraction_of_update_bound']:.2f} of "
        f"the update-bound limit ({ha['update_bound_env_steps_per_s']:.1f} and "
        f"{dqn['update_bound_env_steps_per_s']:.1f} env steps/s)",
        f"does not learn costs {1e3 / ha['compiled_no_learning_env_steps_per_s']:.1f} and "
        f"{1e3 / dqn['compiled_no_learning_env_steps_per_s']:.1f} ms",
        "dqn " + ", ".join(f"{r['env_steps_per_s']:.1f}" for r in rows) + " env steps/s",
        f"training score {interval(last)} and hyperagent's {interval(last_ha)} against random "
        f"play's {interval(random)}",
        f"greedy final policies scored {finals[0]:.1f} and {finals[1]:.2f}",
    ] + _cleanrl_phrases()


def _update_cost_phrases() -> list[str]:
    result = _load("hyperagent_update_cost.json")
    work, before = result["work"], result["baseline"]["work"]["hyperagent"]
    loop = result["in_loop"]["median_seconds"]
    base_loop = result["baseline"]["in_loop"]["median_seconds"]

    def gflops(name: str) -> str:
        return f"{work[name]['gflops']:.2f}"

    return [
        f"dqn {gflops('dqn')} GFLOP, hyperagent {gflops('hyperagent')} "
        f"({work['hyperagent']['gflops_ratio_to_dqn']:.2f}x; {before['gflops']:.2f} and "
        f"{before['gflops_ratio_to_dqn']:.2f}x at {result['baseline']['commit'][:7]}",
        f"Without the gradient-norm penalty hyperagent needs "
        f"{gflops('hyperagent_no_grad_penalty')} GFLOP, with the prior reading the learned torso "
        f"(no second CNN) {gflops('hyperagent_shared_prior_torso')}, and without both "
        f"{gflops('hyperagent_no_grad_penalty_shared_prior_torso')}",
        f"hyperagent gradient step costs {loop['hyperagent'] * 1e3:.1f} ms against dqn's "
        f"{loop['dqn'] * 1e3:.1f} ms ({result['in_loop']['median_ratio']:.2f}x, median of "
        f"{len(result['in_loop']['ratio_hyperagent_to_dqn'])} rounds; "
        f"{base_loop['hyperagent'] * 1e3:.1f} ms and "
        f"{result['baseline']['in_loop']['median_ratio']:.2f}x with",
        "scored " + ", ".join(f"{x:.1f}" for x in _load("atari_alien_check.json")["games"]
                              ["Alien"]["hyperagent"]["evals"]["20000"]) + ", each inside",
    ]


def _cleanrl_phrases() -> list[str]:
    """The sentences on CleanRL's own script and on the update."""
    peer = _load("atari_throughput.json")["cleanrl"]["summary"]
    quiet, loaded = peer["quiet"], peer["loaded"]
    update = _load("atari_update.json")["summary"]
    low, high = quiet["ratio_cleanrl_settings_range"]
    return [
        f"trains at {quiet['ours_cleanrl_settings_median']:.1f} env steps/s against "
        f"{quiet['cleanrl_median']:.1f}, a median per-round ratio of\n"
        f"{quiet['ratio_cleanrl_settings_median']:.2f} over 5 interleaved rounds "
        f"({low:.2f}-{high:.2f})",
        f"ratio is {loaded['ratio_cleanrl_settings_median']:.2f} "
        f"({loaded['ours_cleanrl_settings_median']:.1f} against\n"
        f"{loaded['cleanrl_median']:.1f})",
        f"the ratio is {quiet['ratio_own_settings_median']:.2f} quiet and "
        f"{loaded['ratio_own_settings_median']:.2f}\nloaded",
        f"it costs {update['agent_in_loop_cleanrl_settings_ms']:.1f} ms of each "
        f"{4e3 / quiet['ours_cleanrl_settings_median']:.1f} ms",
        f"takes {update['patch_conv_in_scan_ms']:.1f} ms against PyTorch's "
        f"{update['pytorch_ms']:.1f} ms",
        f"takes\n{update['flax_conv_in_scan_ms']:.1f} ms inside a scan",
    ]


def _parity_phrases() -> list[str]:
    """Per evaluation step of the Alien parity run: our mean over seeds with [min, max], the
    seeds' count, and the reference's mean [min, max]."""
    alien = _load("atari_parity.json")["games"]["Alien"]
    ours, ref = alien["hyperagent"]["evals"], alien["reference_hyperagent"]
    phrases = []
    for step in ("20000", "40000"):
        if step in ours:
            v = ours[step]
            r = ref[step]
            seeds = f"{len(v)} seed{'s' if len(v) != 1 else ''}"
            phrases.append(f"after {int(step) // 1000}k agent steps {sum(v) / len(v):.1f} "
                           f"[{min(v):.0f}, {max(v):.0f}] ({seeds}; the authors' "
                           f"{r[0]:.1f} [{r[1]:.0f}, {r[2]:.0f}])")
    random = alien["baselines"]["random"]
    phrases.append(f"uniformly random play scores {random['mean']:.1f} here ({random['n']} "
                   f"games; published 227.8)")
    if "dqn_100k" in alien:
        dqn = alien["dqn_100k"]["evals"]
        cells = [f"{sum(dqn[s]) / len(dqn[s]):.1f} ({len(dqn[s])} seed"
                 f"{'s' if len(dqn[s]) != 1 else ''})" for s in ("0", "20000", "40000")
                 if s in dqn]
        phrases.append("DQN with the Atari-100k settings (`dqn_100k`) at the same budget "
                       "scores " + " -> ".join(cells))
    return phrases


def _llm_phrases() -> list[str]:
    """The float32 LLM RL reference: held-out greedy and sampled reward from the warm start to
    the end of the run, mean over seeds with the 95% interval, and the seeds' count."""
    out = _load("llm_reference.json")
    warm, runs = out["warm_start"], out["runs"][out["reference"]]["summary"]
    phrases = []
    for measure in ("greedy", "sampled"):
        final = runs[f"{measure}_final"]
        lo, hi = final["ci95"]
        phrases.append(f"{measure} reward {warm[measure]:.3f} -> {final['mean']:.3f} "
                       f"[{lo:.3f}, {hi:.3f}] ({len(final['values'])} seeds")
    return phrases


def _games_phrases() -> list[str]:
    """GP-MW's matrix-game experiment: each learner's time-averaged regret at T = 200 over our
    games with its 95% interval, and the authors' code on our first games."""
    out = _load("games.json")

    def cell(row) -> str:
        lo, hi = row["ci95"]
        return f"{row['mean']:.3f} [{lo:.3f}, {hi:.3f}]"

    ours = {k: cell(v["p1"]["200"]) for k, v in out["ours"].items()}
    tp = out["throughput"]["gp_mw_vs_exp3"]
    return [f"on {out['games']} games", f"{ours['gp_mw_vs_random']} for GP-MW",
            f"{ours['exp3_vs_random']} for Exp3.P", f"{ours['hedge_vs_random']} for",
            f"GP-MW on Ensemble++ (M = 16) {ours['ensemble_mw_vs_random']}",
            f"gives {cell(out['authors_on_our_games']['gp_mw_vs_random']['p1']['200'])} for GP-MW",
            f"ours gives {cell(out['ours_on_the_same_games']['gp_mw_vs_random']['p1']['200'])}",
            f"plays {tp['hyperx']['1000']['seed_rounds_per_second'] / 1000:.0f}k GP-MW seed-rounds"
            f" per second at 1000 seeds, {tp['hyperx']['1000']['ratio_to_numpy']:.0f}x a per-seed"]


def _routing_cell(row) -> str:
    lo, hi = row["ci95"]
    return f"{row['mean']:.0f} [{lo:.0f}, {hi:.0f}]"


def _routing_phrases() -> list[str]:
    """The routing experiment at n = 50: each learner's time-averaged regret at T with its
    interval over subsets, and the authors' stored means."""
    out = _load("games_routing.json")
    ours = {k: _routing_cell(v["50"]["regret"]["100"]) for k, v in out["summary"]["ours"].items()}
    authors = {k: f"{v['50']['regret']['100']['mean']:.0f}" for k, v in out["authors"].items()}
    return [f"{out['draws']} subsets of 50 learning players x {out['seeds']} seeds",
            f"{ours['gp_mw']} for GP-MW, {ours['exp3']} for Exp3.P and {ours['hedge']} for",
            f"stored means: {authors['gp_mw']}, {authors['exp3']}, {authors['hedge']})",
            f"GP-MW on Ensemble++ {ours['ensemble_mw']}"]


def _linear_core_phrases() -> list[str]:
    """The update and sample times at d = 1000, M = 64."""
    out = _load("linear_core.json")
    rows = {r["method"]: r for r in out["results"] if r["d"] == 1000 and r["M"] == 64}
    pp, recompute = rows["ensemble_pp"], rows["recompute"]
    return [f"an Ensemble++ update takes {pp['update_us']:.0f} us against "
            f"{recompute['update_us']:.0f} us for the reference's O(d^2 M) recompute "
            f"({out['target']['measured_update_speedup']:.1f}x;",
            f"a sample takes {pp['sample_us']:.1f} us against "
            f"{rows['exact_ts_sqrt']['sample_us']:.0f} us (exact TS, maintained square root) and "
            f"{rows['exact_ts_refactor']['sample_us'] / 1e3:.2f} ms (exact TS, refactorising)"]


def _llm_corrections_phrases() -> list[str]:
    """The cost of the corrections against a forward+backward, and the sum of squared
    probabilities' error against float64."""
    out = _load("llm_corrections.json")
    cost, sum_sq = out["overhead"], out["sum_sq"]

    def sci(x: float) -> str:  # 3.3e-7
        return re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{x:.1e}").replace("e+", "e")

    return [f"OTB and all diagnostics cost {cost['ratio_corrections'] * 100:.2f}% of a "
            f"forward+backward; the OTB logit-gradient proxy fused into the forward adds "
            f"{cost['ratio_fused_proxy'] * 100:.2f}%",
            f"relative error against float64 of "
            f"{sci(sum_sq['float32']['logsumexp']['max_rel_err_vs_f64'])} for float32 logits and "
            f"{sci(sum_sq['bfloat16']['logsumexp']['max_rel_err_vs_f64'])} for bfloat16 logits"]


def _results_page_phrases() -> list[str]:
    return (_bandit_phrases() + _deepsea_phrases() + _atari_phrases() + _update_cost_phrases()
            + _parity_phrases()
            + _llm_phrases() + _games_phrases() + _routing_phrases() + _linear_core_phrases()
            + _llm_corrections_phrases())


@pytest.mark.parametrize("phrase", _results_page_phrases())
def test_the_results_page_states_the_result_file(phrase):
    assert " ".join(phrase.split()) in _text(RESULTS_PAGE), \
        f"docs/results.md does not say: {phrase!r}"


def _interval(row: dict, fmt: str) -> str:
    lo, hi = row["ci95"]
    return f"{row['mean']:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def _median(values: list[int]) -> float:
    """The median of the seeds that learned (bsuite's -1: never)."""
    learned = sorted(v for v in values if v > 0)
    mid = len(learned) // 2
    return learned[mid] if len(learned) % 2 else (learned[mid - 1] + learned[mid]) / 2


def _readme_table_phrases() -> list[str]:
    """The second column of the README's results table, one cell per headline result."""
    size = _load("bandit_ensemble_size.json")
    d50 = size["cells"]["d50_k1000"]

    def ms(cell: dict) -> str:
        return f"{cell['mean']:.0f} +- {cell['sd']:.0f}"

    neural = _load("bandit_neural.json")["ranking"]
    behind = sum("neural_ensemble_pp" in r["behind_best"] for r in neural.values())
    tied = sum("neural_ensemble_pp" in r["tied_with_best"] for r in neural.values())
    speed = _load("bandit_neural_throughput.json")["results"]["quadratic"]
    pp, plus = speed["neural_ensemble_pp"], speed["neural_ensemble_plus"]
    ratios = [pp[s]["seed_rounds_per_s"] / plus[s]["seed_rounds_per_s"] for s in pp]

    core = _load("linear_core.json")
    rows = {r["method"]: r for r in core["results"] if r["d"] == 1000 and r["M"] == 64}

    sweep = [r for r in _load("bandit_throughput.json")["rows"] if r["size"] == "d50_k1000"]
    rates = sorted(r["jax_seed_steps_per_s"] / 1e3 for r in sweep)
    over_numpy = sorted(r["speedup_vs_numpy"] for r in sweep)

    def cell(agent: str, n: int) -> list[int]:
        path = RESULTS / "deepsea_scaling" / f"{agent}_N{n}.json"
        return json.loads(path.read_text())["learned_episode_bsuite"]

    reference = _load("deepsea_reference.json")["median"]
    throughput = _load("deepsea_throughput.json")
    (scan64,) = [r for r in throughput["rows"] if r["driver"] == "scan" and r["seeds"] == 64]

    cleanrl = _load("atari_throughput.json")["cleanrl"]["summary"]["quiet"]
    alien = _load("atari_parity.json")["games"]["Alien"]
    ours40, ref40 = alien["hyperagent"]["evals"]["40000"], alien["reference_hyperagent"]["40000"]

    llm = _load("llm_reference.json")
    greedy = llm["runs"][llm["reference"]]["summary"]["greedy_final"]

    games = _load("games.json")
    ours, authors = games["ours"], games["authors_stored"]
    routing = _load("games_routing.json")
    ours_r = {k: v["50"]["regret"]["100"] for k, v in routing["summary"]["ours"].items()}
    authors_r = {k: v["50"]["regret"]["100"]["mean"] for k, v in routing["authors"].items()}

    cost = _load("llm_corrections.json")["overhead"]
    return [
        f"final regret {ms(d50['ensemble_pp:gaussian:M=32'])} with M = 32 against "
        f"{ms(d50['exact_ts'])} for exact TS (d = 50, 1000 arms, "
        f"{size['settings']['seeds']} seeds)",
        f"behind the best learner on {behind} of {len(neural)} games, tied on {tied}; "
        f"{min(ratios):.1f}-{max(ratios):.1f}x the seed-rounds per second of Ensemble+",
        f"{rows['ensemble_pp']['update_us']:.0f} us per update at d = 1000, M = 64 against "
        f"{rows['recompute']['update_us']:.0f} us for the O(d^2 M) recompute "
        f"({core['target']['measured_update_speedup']:.1f}x)",
        f"{rates[0]:.0f}k-{rates[-1]:.0f}k seed-rounds/s at d = 50, K = 1000 "
        f"({over_numpy[0]:.1f}-{over_numpy[-1]:.1f}x a per-seed NumPy loop)",
        f"median episode of learning {_median(cell('hyperagent', 30)):.0f} at N = 30 and "
        f"{_median(cell('hyperagent', 40)):.0f} at N = 40; the authors' code "
        f"{reference['30']} and {reference['40']}",
        f"{scan64['env_steps_per_s']:,.0f} env steps/s over 64 vmapped seeds, "
        f"{throughput['scan_over_loop']['64']:.1f}x a Python loop",
        f"{cleanrl['ours_cleanrl_settings_median']:.1f} env steps/s against "
        f"{cleanrl['cleanrl_median']:.1f} ({cleanrl['ratio_cleanrl_settings_median']:.2f}x, "
        f"median of {cleanrl['rounds']} rounds)",
        f"{sum(ours40) / len(ours40):.1f} [{min(ours40):.0f}, {max(ours40):.0f}] on Alien after "
        f"40k agent steps ({len(ours40)} seeds); the authors' {ref40[0]:.1f} "
        f"[{ref40[1]:.0f}, {ref40[2]:.0f}]",
        f"held-out greedy reward {llm['warm_start']['greedy']:.3f} -> "
        f"{_interval(greedy, '.3f')} in {llm['steps']} RL steps ({len(greedy['values'])} seeds)",
        f"GP-MW {_interval(ours['gp_mw_vs_random']['p1']['200'], '.3f')} against Exp3.P "
        f"{_interval(ours['exp3_vs_random']['p1']['200'], '.3f')} ({games['games']} games); "
        f"the authors' {authors['gp_mw_vs_random']['p1_mean']['200']:.3f} and "
        f"{authors['exp3_vs_random']['p1_mean']['200']:.3f}",
        f"GP-MW {_interval(ours_r['gp_mw'], '.0f')} against Exp3.P "
        f"{_interval(ours_r['exp3'], '.0f')}; the authors' {authors_r['gp_mw']:.0f} and "
        f"{authors_r['exp3']:.0f}",
        f"{cost['ratio_corrections'] * 100:.2f}% of a forward+backward",
    ]


def _readme_results_table() -> list[list[str]]:
    """The rows of the table under README.md's "## Results" heading, as lists of cells."""
    lines = README.read_text().split("\n## Results\n", 1)[-1].splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
    assert start is not None, "README.md has no table under '## Results'"
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows


_PHRASE_IDS = ["ensemble_pp", "neural", "linear_core", "sweeps", "deepsea", "deepsea_speed",
               "atari_speed", "atari_parity", "llm", "games", "routing", "llm_cost"]


@pytest.mark.parametrize("phrase", _readme_table_phrases(), ids=_PHRASE_IDS)
def test_the_readme_table_states_the_result_file(phrase):
    cells = [row[1] for row in _readme_results_table()]
    assert phrase in cells, (f"README.md's results table has no row whose second cell is "
                             f"{phrase!r} (formatted from benchmarks/results); its cells: {cells}")


def test_every_number_of_the_readme_table_is_checked():
    """No row of the table holds a number that no phrase above checks: the first column (what
    was measured) has no digits, the second is one of the checked phrases, the third links to
    a section of docs/results.md."""
    expected = _readme_table_phrases()
    headings = {_anchor(line.lstrip("#").strip())
                for line in RESULTS_PAGE.read_text().splitlines() if line.startswith("## ")}
    rows = _readme_results_table()
    assert len(rows) == len(expected), (f"README.md's results table has {len(rows)} rows, "
                                        f"tests/test_readme_results.py checks {len(expected)}")
    for what, measured, link in rows:
        assert not re.search(r"\d", what), f"README.md results table: a number in {what!r}"
        assert measured in expected, f"README.md results table: {measured!r} is not checked"
        match = re.fullmatch(r"\[[^]]+\]\(docs/results\.md#([\w-]+)\)", link)
        assert match and match.group(1) in headings, \
            f"README.md results table: {link!r} is not a link to a section of docs/results.md"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


_CELL = re.compile(r"`?([a-z_]+)`? N = (\d+): ((?:-?\d+, )*-?\d+) \((\d+)/(\d+)\)")


def test_deepsea_per_seed_episodes_equal_the_cells():
    found = _CELL.findall(_text(RESULTS_PAGE))
    assert len(found) >= 6, "expected the DeepSea per-seed lists in docs/results.md"
    for agent, size, episodes, learned, seeds in found + _CELL.findall(_readme()):
        cell = json.loads((RESULTS / "deepsea_scaling" / f"{agent}_N{size}.json").read_text())
        per_seed = cell["learned_episode_bsuite"]
        assert [int(e) for e in episodes.split(", ")] == per_seed, (agent, size)
        assert (int(learned), int(seeds)) == (sum(e > 0 for e in per_seed), len(per_seed))


def test_the_games_page_table_equals_the_result_file():
    out = _load("games.json")
    page = " ".join((ROOT / "docs" / "games.md").read_text().split())
    for name, row in out["ours"].items():
        stored = out["authors_stored"].get(name)
        cells = [row["p1"]["200"]]
        cells += [out[k][name]["p1"]["200"] for k in ("authors_on_our_games",
                                                      "ours_on_the_same_games")
                  if name in out[k]]
        for cell in cells:
            lo, hi = cell["ci95"]
            assert f"{cell['mean']:.3f} [{lo:.3f}, {hi:.3f}]" in page, (name, cell)
        if stored:
            assert f"{stored['p1_mean']['200']:.3f} ± {stored['p1_std']['200']:.3f}" in page
    for row in out["throughput"].values():
        if isinstance(row, dict) and "hyperx" in row:
            cells = [f"{row['numpy_per_seed_loop']['seed_rounds_per_second'] / 1000:.1f}k"]
            cells += [f"{v['seed_rounds_per_second'] / 1000:.0f}k ({v['ratio_to_numpy']:.0f}x)"
                      for v in row["hyperx"].values()]
            assert " | ".join(cells) in page, cells


def test_the_bandwidth_table_equals_the_result_file():
    out = _load("llm_bandwidth.json")
    page = " ".join((ROOT / "docs" / "llm" / "end_to_end.md").read_text().split())
    for name, run in out["runs"].items():
        cells = []
        for key in ("adv_bits_per_episode", "adv_bits_per_token"):
            v = run["mean_over_steps"][key]
            cells.append(f"{v['mean']:.2f} [{v['ci95'][0]:.2f}, {v['ci95'][1]:.2f}]")
        d = run["token_minus_episode_bits"]
        cells.append(f"{d['mean']:+.2f} [{d['ci95'][0]:.2f}, {d['ci95'][1]:.2f}]")
        assert run["episode_bits_never_above_bound"]
        assert f"| {name.upper()} | " + " | ".join(cells) + " |" in page, cells


def test_the_routing_table_equals_the_result_file():
    out = _load("games_routing.json")
    page = " ".join((ROOT / "docs" / "games.md").read_text().split())
    for name, by_n in out["summary"]["ours"].items():
        for n, row in by_n.items():
            stored = (out["authors"] or {}).get(name, {}).get(n)
            cells = [_routing_cell(row["regret"]["100"])]
            cells += [_routing_cell(stored["regret"]["100"])] if stored else []
            line = f"| `{name}` | {n} | " + " | ".join(cells)
            assert line in page, line
