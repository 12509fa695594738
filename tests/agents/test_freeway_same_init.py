"""benchmarks/freeway_same_init.py's command line and summary (the runs themselves need the
authors' environment and hours of CPU: see the module's docstring)."""

import re
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import freeway_same_init  # noqa: E402


@pytest.mark.parametrize("argv, message", [
    (["--every", "300", "--steps", "1000"], "--every to divide --steps"),
    (["--every", "0"], "--every to divide --steps"),
    (["--steps", "200000", "--every", "1000"], "at most 100000"),
    (["--averse-share", "1.5"], "a share in \\[0, 1\\]"),
    (["--seeds", "3", "x"], "integers or 'averse'"),
    (["--seeds", "-1"], "non-negative"),
    (["--find-averse", "0"], "a positive count"),
    (["--codes", "ours", "--set", "learning_rate=1"], "KEY one of prior_scale"),
    (["--codes", "ours", "--set", "prior_scale"], "KEY=VALUE"),
    (["--codes", "ours", "--set", "prior_scale=big"], "a number for prior_scale"),
    (["--codes", "ours", "--set", "index_dim=2.5"], "a number for index_dim"),
    (["--set", "redraw_prob=0.05"], "expected --codes ours"),
    (["--codes", "ours", "--set", "redraw_prob=2"], "--set: redraw_prob"),
    (["--backend", "ale"], "expected --codes ours"),
    (["--codes", "ours", "--backend", "gym"], "invalid choice"),
    (["--seeds", "3", "--streams", "1001", "-2"], "--streams: expected non-negative"),
    (["--seeds", "3", "--streams", "x"], "invalid int value"),
    (["--pool", "a.json"], "--pool: expected --summary PATH"),
    (["--pool", "a.json", "--summary", "b.json", "--horizon", "0"], "--horizon: expected"),
])
def test_bad_arguments_are_refused_before_anything_runs(argv, message, monkeypatch, capsys,
                                                        tmp_path):
    monkeypatch.setattr(sys, "argv", ["freeway_same_init.py", *argv, "--out-dir",
                                      str(tmp_path / "out")])
    with pytest.raises(SystemExit):
        freeway_same_init.main()
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_the_summary_reports_each_phase_rate():
    rows = [dict(step=s, wall_s=w, q_std=[0.1, 0.2, 0.3], up_share=0.5)
            for s, w in ((0, 0.0), (1000, 10.0), (2000, 12.0), (3000, 72.0))]
    text = freeway_same_init._summary(dict(rows=rows, first_reward_step=None))
    assert "learning (after step 2000): 60.0 s per 1000 steps" in text
    assert "random (after the first measurement): 2.0 s per 1000 steps" in text


def _record(code: str, seed: int, first: int | None) -> dict:
    rows = [dict(step=s, wall_s=float(s), q_std=[0.1, 0.2 / (1 + s), 0.3], up_share=0.3)
            for s in (0, 1000, 2000)]
    games = [dict(step=900, score=0.0), dict(step=1900, score=0.0 if first is None else 2.0)]
    if code == "reference":  # the authors' runner logs the clipped return
        games = [dict(step=g["step"], clipped_return=g["score"]) for g in games]
    return dict(code=code, seed=seed, steps=2000, rows=rows, episodes=games,
                first_reward_step=first, done=True, init_up_share_at_start=0.0)


def test_summarise_by_hand(tmp_path):
    """Three seeds: ours scores on seed 1 only, the reference on all three. By hand: rates
    1/3 and 3/3; Clopper-Pearson for 3/3 is [0.025^(1/3), 1] = [0.2924, 1]; the paired table
    [[1, 0], [2, 0]] gives the exact McNemar p = P(Bin(2, 1/2) in {0, 2}) = 0.5; Fisher's
    table [[1, 2], [3, 0]] has hypergeometric probabilities 0.2, 0.6, 0.2 for a = 1, 2, 3, so
    p = 0.4. A seed finished by one code only is left out."""
    import json

    for seed, ours, ref in ((0, None, 1500), (1, 1200, 1700), (2, None, 1900)):
        folder = tmp_path / f"seed{seed}"
        folder.mkdir()
        for code, first in (("ours", ours), ("reference", ref)):
            (folder / f"progress_{code}.json").write_text(json.dumps(_record(code, seed, first)))
    (tmp_path / "seed5").mkdir()
    (tmp_path / "seed5" / "progress_ours.json").write_text(json.dumps(_record("ours", 5, 10)))
    out = freeway_same_init.summarise(str(tmp_path), str(tmp_path / "summary.json"))
    assert out["seeds"] == [0, 1, 2]
    assert (out["codes"]["ours"]["seeds_scoring"], out["codes"]["reference"]["seeds_scoring"]) \
        == (1, 3)
    assert out["codes"]["reference"]["rate_ci95"] == pytest.approx([0.025 ** (1 / 3), 1.0],
                                                                   abs=1e-4)
    assert out["tests"]["paired_table_ours_rows_reference_columns"] == [[1, 0], [2, 0]]
    assert out["tests"]["mcnemar_exact_p"] == pytest.approx(0.5)
    assert out["tests"]["fisher_exact_p"] == pytest.approx(0.4)
    assert (out["tests"]["seeds_ours_scored_first"],
            out["tests"]["seeds_reference_scored_first"]) == (1, 2)
    assert out["codes"]["reference"]["mean_best_of_last_two_games"] == pytest.approx(2.0)
    assert out["per_seed"]["1"]["ours"]["q_std_up"] == pytest.approx([0.2, 0.2 / 1001, 0.2 / 2001])
    assert (tmp_path / "summary.json").exists() and (tmp_path / "summary.png").stat().st_size


def test_paired_tests_by_hand():
    """Seven seeds. Scoring: both on 4, only b on 2, neither on 1: table [[4, 0], [2, 1]],
    McNemar p = P(Bin(2, 1/2) in {0, 2}) = 0.5; Fisher on [[4, 3], [6, 1]]: hypergeometric
    weights C(10, k) C(4, 7 - k) = 120, 840, 1512, 840, 120 for k = 3..7 of C(14, 7) = 3432,
    p = (120 + 840 + 840 + 120) / 3432. Who scored first: b on the five seeds where a scored
    later or never, a on one, none on the seed where neither scored; sign test
    p = 2 P(Bin(6, 1/2) <= 1) = 2 * 7 / 64."""
    a = [None, None, 5000, 6000, 7000, 100, None]
    b = [3000, 3100, 3200, 3300, 3400, 3500, None]
    out = freeway_same_init._paired_tests(a, b, "a", "b")
    assert out["paired_table_a_rows_b_columns"] == [[4, 0], [2, 1]]
    assert out["mcnemar_exact_p"] == pytest.approx(0.5)
    assert out["fisher_exact_p"] == pytest.approx(1920 / 3432)
    assert (out["seeds_a_scored_first"], out["seeds_b_scored_first"]) == (1, 5)
    assert out["first_reward_sign_test_p"] == pytest.approx(14 / 64)
    nothing = freeway_same_init._paired_tests([None, 7], [None, 7], "a", "b")
    assert (nothing["seeds_a_scored_first"], nothing["first_reward_sign_test_p"]) == (0, 1.0)


def test_first_learning_window_by_hand():
    """Four seeds measured at step 3000, the first after the 2000 random steps. Seed 3: ours
    scored at 2500, so it is left out of the tests; on seeds 0, 1, 2 nobody had. UP share
    (reference, ours): (0.3, 0.1), (0.2, 0.1), (0.1, 0.4): reference above on 2 of 3, sign
    test p = 1. UP advantage with Q means (NOOP, UP, DOWN): reference (1, 2, 3) gives
    2 - 2 = 0 on every seed; ours (1, 0, 3) gives -2 on seeds 0 and 1 and (1, 5, 3) gives +3
    on seed 2: reference above on 2 of 3. Seed 4 has no row after step 2000: left out."""
    def record(first, rows):
        return dict(first_reward_step=first, rows=[
            dict(step=2000, up_share=0.33, q_mean=[0.0, 0.0, 0.0]),
            *(dict(step=3000, up_share=u, q_mean=q) for u, q in rows)])

    ref, low, high = [1.0, 2.0, 3.0], [1.0, 0.0, 3.0], [1.0, 5.0, 3.0]
    records = {0: dict(reference=record(None, [(0.3, ref)]), ours=record(None, [(0.1, low)])),
               1: dict(reference=record(4000, [(0.2, ref)]), ours=record(None, [(0.1, low)])),
               2: dict(reference=record(None, [(0.1, ref)]), ours=record(9000, [(0.4, high)])),
               3: dict(reference=record(None, [(0.9, ref)]), ours=record(2500, [(0.1, low)])),
               4: dict(reference=record(None, []), ours=record(None, []))}
    out = freeway_same_init._first_learning_window(records, [0, 1, 2, 3, 4])
    assert sorted(out["per_seed"]) == ["0", "1", "2", "3"]
    assert out["seeds_neither_scored"] == [0, 1, 2]
    assert out["per_seed"]["3"]["ours"]["scored_by_then"]
    assert out["per_seed"]["0"]["ours"]["up_advantage"] == pytest.approx(-2.0)
    assert out["per_seed"]["2"]["ours"]["up_advantage"] == pytest.approx(3.0)
    assert out["up_share_reference_above_ours"] == [2, 3]
    assert out["up_advantage_reference_above_ours"] == [2, 3]
    assert out["up_share_sign_test_p"] == pytest.approx(1.0)


def test_summarise_refuses_a_folder_with_no_finished_pair(tmp_path):
    with pytest.raises(SystemExit, match="no seed"):
        freeway_same_init.summarise(str(tmp_path), str(tmp_path / "summary.json"))


def test_configuration_changes_are_named_in_one_order():
    changes = freeway_same_init.parse_changes(["redraw_prob=0.05", "index_dim=8"])
    assert changes == (("index_dim", 8), ("redraw_prob", 0.05))
    assert isinstance(changes[0][1], int)
    assert freeway_same_init.variant_name(changes) == "ours-index_dim=8-redraw_prob=0.05"
    assert freeway_same_init.variant_name(()) == "ours"
    assert freeway_same_init.variant_name((), "ale") == "ours-backend=ale"
    assert freeway_same_init.variant_name(changes[:1], "ale") == "ours-index_dim=8-backend=ale"


def test_a_changed_index_dimension_gets_probe_indices_of_that_dimension():
    import numpy as np

    probe = dict(indices=np.zeros((64, 4), np.float32), scan_indices=np.ones((256, 4)))
    assert freeway_same_init.probe_indices(probe, "indices") is probe["indices"]
    wide = freeway_same_init.probe_indices(probe, "scan_indices", (("index_dim", 8),))
    assert wide.shape == (256, 8) and wide.dtype == np.float32
    again = freeway_same_init.probe_indices(probe, "scan_indices", (("index_dim", 8),))
    np.testing.assert_array_equal(wide, again)


def test_summarise_reports_each_changed_configuration_by_hand(tmp_path):
    """The published pairs as in test_summarise_by_hand; a redraw_prob change finished on
    seeds 0 and 2 (scoring on 0) and on seed 5, which has no pair and is left out. By hand:
    rate 1/2, Clopper-Pearson [1 - 0.975^(1/2), 0.975^(1/2)] = [0.0126, 0.9874]; against ours
    (which scores on neither seed) the table [[0, 1], [0, 1]] and McNemar
    p = P(Bin(1, 1/2) in {0, 1}) = 1; against the reference (both score) [[1, 0], [1, 0]],
    p = 1."""
    import json

    for seed, ours, ref in ((0, None, 1500), (1, 1200, 1700), (2, None, 1900)):
        folder = tmp_path / f"seed{seed}"
        folder.mkdir()
        for code, first in (("ours", ours), ("reference", ref)):
            (folder / f"progress_{code}.json").write_text(json.dumps(_record(code, seed, first)))
    name = "ours-redraw_prob=0.05"
    for seed, first in ((0, 800), (2, None), (5, 300)):
        (tmp_path / f"seed{seed}").mkdir(exist_ok=True)
        record = dict(_record("ours", seed, first), code=name, changes={"redraw_prob": 0.05})
        (tmp_path / f"seed{seed}" / f"progress_{name}.json").write_text(json.dumps(record))
    out = freeway_same_init.summarise(str(tmp_path), str(tmp_path / "summary.json"))
    variant = out["variants"][name]
    assert variant["paired_seeds"] == [0, 2] and variant["changes"] == {"redraw_prob": 0.05}
    assert (variant["seeds_scoring"], variant["rate"]) == (1, 0.5)
    assert variant["rate_ci95"] == pytest.approx([0.0126, 0.9874], abs=1e-4)
    assert variant["first_reward_step"] == {"0": 800, "2": None}
    assert variant["against_ours"]["paired_table_variant_rows_ours_columns"] == [[0, 1], [0, 1]]
    assert variant["against_ours"]["mcnemar_exact_p"] == pytest.approx(1.0)
    assert variant["against_reference"]["paired_table_variant_rows_reference_columns"] == \
        [[1, 0], [1, 0]]
    assert out["tests"]["paired_table_ours_rows_reference_columns"] == [[1, 0], [2, 0]]


def test_streams_are_summarised_by_hand(tmp_path):
    """Seed 0's weights on streams 1001-1003 and seed 3's on 1001: ours never scores on
    (0, 1001) nor (3, 1001), scores on (0, 1002); the reference scores on all; (0, 1003) has
    only the reference's run and an unfinished one of ours, so it is left out. By hand: seed
    0, ours 1/2 and the reference 2/2, Fisher on [[1, 1], [2, 0]]: every table with these
    margins is at least as extreme, p = 1; pooled, ours 1/3 and the reference 3/3,
    Fisher on [[1, 2], [3, 0]]: P(a) = C(4, a) C(2, 3 - a) / C(6, 3) = 0.2, 0.6, 0.2 for
    a = 1, 2, 3, so p = 0.2 + 0.2 = 0.4. With no published pair in the folder the summary
    holds the streams alone."""
    import json

    runs = {(0, 1001): (None, 3000), (0, 1002): (4000, 3500), (3, 1001): (None, 3200)}
    for (seed, stream), firsts in runs.items():
        folder = tmp_path / f"seed{seed}"
        folder.mkdir(exist_ok=True)
        for code, first in zip(("ours", "reference"), firsts, strict=True):
            name = f"{code}-stream={stream}"
            (folder / f"progress_{name}.json").write_text(
                json.dumps(dict(_record(code, seed, first), code=name, stream=stream)))
    (tmp_path / "seed0" / "progress_reference-stream=1003.json").write_text(
        json.dumps(_record("reference", 0, 2500)))
    (tmp_path / "seed0" / "progress_ours-stream=1003.json").write_text(
        json.dumps(dict(_record("ours", 0, 2500), done=False)))
    out = freeway_same_init.summarise(str(tmp_path), str(tmp_path / "summary.json"))
    assert set(out) == {"game", "streams"}
    seed0 = out["streams"]["per_seed"]["0"]
    assert seed0["streams"] == [1001, 1002] and seed0["steps"] == [2000]
    assert seed0["ours"]["first_reward_step"] == {"1001": None, "1002": 4000}
    assert (seed0["ours"]["seeds_scoring"], seed0["reference"]["seeds_scoring"]) == (1, 2)
    assert seed0["fisher_exact_p"] == pytest.approx(1.0)
    assert out["streams"]["per_seed"]["3"]["streams"] == [1001]
    pooled = out["streams"]["pooled"]
    assert (pooled["ours"]["seeds_scoring"], pooled["ours"]["seeds"]) == (1, 3)
    assert (pooled["reference"]["seeds_scoring"], pooled["reference"]["seeds"]) == (3, 3)
    assert pooled["fisher_exact_p"] == pytest.approx(0.4)


@pytest.mark.slow
def test_a_run_on_another_stream_keeps_the_seeds_weights(tmp_path):
    """Ours from seed 3's weights on seed 1001's streams: the probe's Q after 200 random steps
    (no update before step 2000) is exactly seed 3's at init, not seed 1001's, and the run
    says which stream it drew from."""
    import numpy as np

    probe = freeway_same_init.make_probe(str(tmp_path / "probe.npz"))
    record = freeway_same_init.run_ours(3, 200, 100, str(tmp_path / "run.json"), probe,
                                        stream=1001)
    assert (record["code"], record["seed"], record["stream"]) == ("ours-stream=1001", 3, 1001)
    init = freeway_same_init.q_values(*freeway_same_init.our_init(3), probe["frames"],
                                      probe["indices"]).mean((0, 1))
    other = freeway_same_init.q_values(*freeway_same_init.our_init(1001), probe["frames"],
                                       probe["indices"]).mean((0, 1))
    assert [r["step"] for r in record["rows"]] == [0, 100, 200]
    np.testing.assert_array_equal(record["rows"][-1]["q_mean"], init)
    assert np.abs(init - other).max() > 1e-3


def test_pool_counts_runs_of_several_summaries_by_the_horizon_by_hand(tmp_path):
    """A pairs summary of 6000-step runs (seed 0: ours first at 5500, the reference at 3000;
    seed 1: ours never, the reference at 2000) and a streams summary (seed 0 on stream 1001:
    ours at 2500, the reference never), pooled at horizon 5000: ours scored 1 of 3 (5500 is
    after the horizon), the reference 2 of 3; Fisher on [[1, 2], [2, 1]]: P(a) = C(3, a)
    C(3, 3 - a) / C(6, 3) = 1/20, 9/20, 9/20, 1/20, so p = 1. A summary of runs shorter than
    the horizon is refused."""
    import json

    pairs = dict(steps=6000, per_seed={
        "0": {"ours": {"first_reward_step": 5500}, "reference": {"first_reward_step": 3000}},
        "1": {"ours": {"first_reward_step": None}, "reference": {"first_reward_step": 2000}}})
    streams = dict(streams=dict(per_seed={"0": dict(
        steps=[5000], ours={"first_reward_step": {"1001": 2500}},
        reference={"first_reward_step": {"1001": None}})}))
    files = []
    for name, data in (("pairs", pairs), ("streams", streams)):
        files.append(str(tmp_path / f"{name}.json"))
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    out = freeway_same_init.pool(files, 5000, str(tmp_path / "pooled.json"))
    assert (out["pooled"]["ours"]["seeds_scoring"], out["pooled"]["ours"]["seeds"]) == (1, 3)
    assert (out["pooled"]["reference"]["seeds_scoring"],
            out["pooled"]["reference"]["seeds"]) == (2, 3)
    assert out["pooled"]["fisher_exact_p"] == pytest.approx(1.0)
    assert out["summaries"][files[0]]["ours"]["seeds_scoring"] == 0
    assert out["summaries"][files[1]]["reference"]["seeds_scoring"] == 0
    assert json.loads((tmp_path / "pooled.json").read_text())["horizon"] == 5000
    # the two seed pairs by the horizon: ours (None, None), the reference (3000, 2000): both
    # discordant against ours, McNemar p = P(Bin(2, 1/2) <= 0) x 2 = 0.5
    assert out["paired"]["seeds"] == 2
    assert out["paired"]["paired_table_ours_rows_reference_columns"] == [[0, 0], [2, 0]]
    assert out["paired"]["mcnemar_exact_p"] == pytest.approx(0.5)
    (tmp_path / "short.json").write_text(json.dumps(dict(pairs, steps=4000)))
    with pytest.raises(SystemExit, match="shorter than --horizon 5000"):
        freeway_same_init.pool([str(tmp_path / "short.json")], 5000, str(tmp_path / "x.json"))
