"""Every bad input users have met gets a clear one-line error naming what is wrong.

One table of (input, expected message): command lines run through ``hyperx.commands.main`` (exit
status 2 and exactly one line ``hyperx: error: ...`` on stderr) and Python calls (a
``ValueError`` / ``TypeError`` whose message is one line). Sizes that cannot fit are refused
from an estimate, before anything is allocated, so these cases take milliseconds.
"""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hyperx.agents import get_config, make_agent
from hyperx.agents.atari import train_atari
from hyperx.agents.deepsea import train_deepsea
from hyperx.commands import build_parser, main
from hyperx.envs.atari import make_atari
from hyperx.llm.tasks import Task
from hyperx.llm.train import RLConfig, make_policy

NAN, INF = math.nan, math.inf
TINY_BANDIT = ["bandit", "--dim", "3", "--arms", "4", "--steps", "20", "--seeds", "2", "--quiet"]
TINY_DEEPSEA = ["deepsea", "--size", "3", "--agent", "dqn", "--seeds", "2", "--episodes", "4",
                "--quiet"]

CLI_CASES = [
    # 3: --out checked before any work
    (["deepsea", "--out", "{file}"], "exists and is not a directory"),
    (["deepsea", "--out", ""], "--out: expected a directory path"),
    (["deepsea", "--out", "/proc/x"], "--out: cannot create directory"),
    (["deepsea", "--out", "{file}/sub"], "--out: cannot create directory"),
    ([*TINY_BANDIT, "--out", ""], "--out: expected a directory path"),
    # an unwritable --out is named before the disk estimate, which read "0 B available" under /proc
    ([*TINY_BANDIT, "--out", "/proc/x"], "--out: cannot create directory '/proc/x'"),
    ([*TINY_BANDIT, "--out", "{file}/sub"], "--out: cannot create directory"),
    ([*TINY_BANDIT, "--out", "{file}"], "exists and is not a directory"),
    ([*TINY_BANDIT, "--out", "{foreign}"], "is not empty and holds no hyperx run"),
    ([*TINY_BANDIT, "--out", "{tmp}/new", "--resume"], "holds no hyperx bandit run"),
    ([*TINY_DEEPSEA, "--out", "{tmp}/x", "--resume", "--overwrite"], "not allowed with"),
    # 5: resuming a different run names the option and both values
    ([*TINY_DEEPSEA, "--out", "{run}", "--checkpoint", "--resume", "--seed", "1"],
     "--seed: 0 (saved) vs 1 (now)"),
    ([*TINY_DEEPSEA, "--out", "{run}", "--checkpoint", "--resume", "--chunk-steps", "7"],
     "--chunk-steps: None (saved) vs 7 (now)"),
    ([*TINY_DEEPSEA, "--out", "{run}", "--checkpoint", "--seed", "5"],
     "--seed: 0 (saved) vs 5 (now); pass --overwrite"),
    ([*TINY_DEEPSEA, "--out", "{run_nockpt}", "--resume"], "without --checkpoint"),
    # 7: non-finite and out-of-range options
    ([*TINY_BANDIT, "--agents", "exact_ts:noise_std=nan", "--out", "{tmp}/o"],
     "noise_std: expected a finite number > 0, got nan"),
    ([*TINY_BANDIT, "--agents", "ensemble_pp:noise_std=inf", "--out", "{tmp}/o"],
     "noise_std: expected a finite number > 0, got inf"),
    ([*TINY_BANDIT, "--agents", "linucb:delta=nan", "--out", "{tmp}/o"], "delta"),
    ([*TINY_BANDIT, "--agents", "epsilon_greedy:epsilon=nan", "--out", "{tmp}/o"],
     "epsilon: expected a finite number in [0.0, 1.0], got nan"),
    ([*TINY_BANDIT, "--agents", "exact_ts:prior_var=abc", "--out", "{tmp}/o"],
     "prior_var: expected a number, got 'abc'"),
    ([*TINY_BANDIT, "--agents", "ensemble_pp:M=2.5", "--out", "{tmp}/o"],
     "option M: expected an integer, got 2.5"),
    ([*TINY_BANDIT, "--agents", "neural_epinet:width=0", "--out", "{tmp}/o"], "config.hidden"),
    ([*TINY_BANDIT, "--seed", "-1", "--out", "{tmp}/o"],
     "argument --seed: expected an integer in [0, 2147483647], got '-1'"),
    ([*TINY_BANDIT, "--seed", "2147483647", "--out", "{tmp}/o"], "--seed, --seeds"),
    # integers that overflowed
    ([*TINY_DEEPSEA, "--seed", "99999999999999999999", "--out", "{tmp}/o"],
     "argument --seed: expected an integer in [0, 2147483647] (the int32 range"),
    (["llm", "--seed", "99999999999999999999", "--out", "{tmp}/o"],
     "argument --seed: expected an integer in [0, 2147483647]"),
    (["llm", "--warmup-steps", "99999999999", "--out", "{tmp}/o"],
     "argument --warmup-steps: expected an integer in [0, 2147483647]"),
    # 11: sizes that cannot fit, the int32 range, options that make no sense
    ([*TINY_BANDIT[:-5], "--seeds", "1e8", "--quiet", "--out", "{tmp}/o"],
     "--seeds 100000000: needs an estimated"),
    (["bandit", "--dim", "300000", "--arms", "4", "--steps", "5", "--seeds", "1",
      "--agents", "exact_ts", "--quiet", "--out", "{tmp}/o"], "needs an estimated"),
    (["bandit", "--dim", "100", "--arms", "4", "--steps", "5", "--seeds", "1",
      "--agents", "ensemble_pp:M=1e9", "--quiet", "--out", "{tmp}/o"],
     "needs an estimated"),
    (["deepsea", "--size", "3000", "--seeds", "20", "--out", "{tmp}/o"],
     "needs an estimated"),
    ([*TINY_BANDIT[:5], "--steps", "1e10", "--out", "{tmp}/o"], "int32"),
    (["deepsea", "--episodes", "1e10", "--out", "{tmp}/o"], "int32"),
    (["deepsea", "--size", "30000", "--episodes", "100000", "--out", "{tmp}/o"],
     "int32 step counter"),
    ([*TINY_BANDIT, "--update-every", "50", "--out", "{tmp}/o"],
     "--update-every: expected < --steps = 20"),
    (["deepsea", "--mapping-seed", "-1", "--out", "{tmp}/o"], "--mapping-seed"),
    ([*TINY_BANDIT, "--seeds-per-part", "0", "--out", "{tmp}/o"], "--seeds-per-part"),
]


@pytest.fixture
def places(tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("x")
    runs = {}
    from hyperx.commands._rundir import write_manifest
    from hyperx.commands.deepsea import SETTINGS as DEEPSEA_SETTINGS

    for name, extra in (("run", ["--checkpoint"]), ("run_nockpt", [])):
        args = build_parser().parse_args([*TINY_DEEPSEA, "--out", "x", *extra])
        (tmp_path / name).mkdir()
        write_manifest(tmp_path / name, "deepsea", {k: getattr(args, k) for k in DEEPSEA_SETTINGS})
        runs[name] = str(tmp_path / name)
    return {"file": str(tmp_path / "afile"), "foreign": str(tmp_path / "foreign"),
            "tmp": str(tmp_path), **runs}


@pytest.mark.parametrize("argv, message", CLI_CASES, ids=[" ".join(a)[:60] for a, _ in CLI_CASES])
def test_command_line_errors_are_one_line(argv, message, places, capsys):
    with pytest.raises(SystemExit) as exc:
        main([a.format(**places) for a in argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert err.startswith("hyperx: error: ") and err.count("\n") == 1, err
    assert message in err, err


@pytest.fixture(scope="module")
def agent():
    from hyperx.agents import get_config, make_agent

    made = make_agent(get_config("dqn"), num_actions=2, obs_example=jnp.int32(0),
                      num_states=16, step_budget=64)
    return made, made.init(jax.random.PRNGKey(0))


def _transition(action=1, reward=0.0):
    from hyperx.agents import Transition

    return Transition(jnp.int32(0), jnp.int32(action), jnp.float32(reward), jnp.int32(1),
                      jnp.bool_(False), jnp.bool_(False))


def _linear(name, **kw):
    from hyperx import linear

    return getattr(linear, name)(3, **kw) if name == "exact_posterior" else getattr(
        linear, name)(3, 4, **kw)


def _learner_update(learner, reward, arm=0, context=(1.0, 0.0, 0.0)):
    from hyperx.bandits.base import BanditSpec

    state = learner.init(jax.random.PRNGKey(0), BanditSpec(num_arms=4, context_dim=3,
                                                           horizon=10))
    return learner.update(state, jax.random.PRNGKey(1), jnp.asarray(context), jnp.int32(arm),
                          jnp.float32(reward))


def _linear_module():
    import hyperx.linear

    return hyperx.linear


def _model_update(name, x, y):
    model = _linear(name, noise_std=1.0)
    return model.update(model.init(jax.random.PRNGKey(0)), jax.random.PRNGKey(1),
                        jnp.asarray(x, jnp.float32), jnp.float32(y))


def _bandits():
    from hyperx.bandits import baselines, linear

    return linear, baselines


PYTHON_CASES = [
    # 7: constructor arguments
    ("bandits.linear.ensemble_pp(noise_std=nan)",
     lambda: _bandits()[0].ensemble_pp(noise_std=NAN), "noise_std: expected a finite number"),
    ("bandits.linear.exact_ts(prior_var=inf)",
     lambda: _bandits()[0].exact_ts(prior_var=INF), "prior_var: expected a finite number"),
    ("linear.ensemble_pp_posterior(3, 4, noise_std=nan)",
     lambda: _linear("ensemble_pp_posterior", noise_std=NAN),
     "noise_std: expected a finite number"),
    ("linear.exact_posterior(3, noise_std=1, prior_var=nan)",
     lambda: _linear("exact_posterior", noise_std=1.0, prior_var=NAN), "prior_var"),
    ("get_config(learning_rate=nan)",
     lambda: __import__("hyperx.agents", fromlist=["get_config"]).get_config(
         "hyperagent", learning_rate=NAN), "learning_rate: expected a finite number > 0"),
    ("get_config(gamma=inf)",
     lambda: __import__("hyperx.agents", fromlist=["get_config"]).get_config(
         "hyperagent", gamma=INF), "gamma: expected a finite number in [0.0, 1.0]"),
    ("russo(prior_var=nan)",
     lambda: __import__("hyperx.envs.bandits", fromlist=["russo"]).russo(prior_var=NAN),
     "prior_var"),
    ("epsilon_greedy(epsilon=nan)",
     lambda: _bandits()[1].epsilon_greedy(NAN), "epsilon: expected a finite number"),
    # 8: non-finite data at the host boundary
    ("ensemble_pp update y=nan", lambda: _model_update("ensemble_pp_posterior", [1, 0, 0], NAN),
     "y: expected finite values"),
    ("ensemble_pp update x with inf",
     lambda: _model_update("ensemble_pp_posterior", [1, INF, 0], 1.0),
     "x: expected finite values, got NaN or inf at index [1]"),
    ("exact_posterior update y=inf", lambda: _model_update("exact_posterior", [1, 0, 0], INF),
     "y: expected finite values"),
    ("exact_ts learner update reward=nan",
     lambda: _learner_update(_bandits()[0].exact_ts(), NAN), "reward: expected finite values"),
    ("epsilon_greedy learner update reward=inf",
     lambda: _learner_update(_bandits()[1].epsilon_greedy(), INF),
     "reward: expected finite values"),
    # 9: out-of-range discrete inputs
    ("per-arm epsilon_greedy update arm=7 of 4",
     lambda: _learner_update(_bandits()[1].epsilon_greedy(mean="per_arm"), 1.0, arm=7),
     "arm: expected integers in [0, 3], got 7"),
    ("deepsea.step action=2",
     lambda: __import__("hyperx.envs.deepsea", fromlist=["step"]).step(
         *(lambda d: (d.make_params(d.bsuite_mapping(3)), d.reset(d.make_params(
             d.bsuite_mapping(3)))[0]))(__import__("hyperx.envs.deepsea", fromlist=["x"])),
         jnp.int32(2)), "action: expected integers in [0, 1], got 2"),
    ("bsuite_mapping(seed=-1)",
     lambda: __import__("hyperx.envs.deepsea", fromlist=["x"]).bsuite_mapping(4, -1),
     "mapping_seed"),
    # 11: shapes and sizes
    ("model.sample(state, key, (-1,))",
     lambda: (lambda m: m.sample(m.init(jax.random.PRNGKey(0)), jax.random.PRNGKey(1), (-1,)))(
         _linear("ensemble_pp_posterior", noise_std=1.0)), "shape: expected an integer in [0,"),
    ("exact_posterior sample (2, -3)",
     lambda: (lambda m: m.sample(m.init(jax.random.PRNGKey(0)), jax.random.PRNGKey(1),
                                 (2, -3)))(
         _linear("exact_posterior", noise_std=1.0)), "shape: expected an integer in [0,"),
    ("run_bandit(horizon=2**31)",
     lambda: __import__("hyperx.bandits.runner", fromlist=["x"]).run_bandit(
         __import__("hyperx.envs.bandits", fromlist=["x"]).russo(3, 4),
         _bandits()[1].uniform_random(), horizon=2**31), "int32 range"),
    ("run_bandit(update_every > horizon)",
     lambda: __import__("hyperx.bandits.runner", fromlist=["x"]).run_bandit(
         __import__("hyperx.envs.bandits", fromlist=["x"]).russo(3, 4),
         _bandits()[1].uniform_random(), horizon=5, update_every=9),
     "update_every: expected < horizon = 5"),
    ("make_program(size x episodes > int32)",
     lambda: __import__("hyperx.agents.deepsea", fromlist=["x"]).make_program(
         __import__("hyperx.agents", fromlist=["x"]).get_config("dqn"), 30000, 100000),
     "int32 step counter"),
]


def _llm(name):
    from hyperx.llm import baselines, corrections, objectives, train

    return {"baselines": baselines, "corrections": corrections, "objectives": objectives,
            "train": train}[name]


def _correction(preset, **arrays):
    shape = (1, 2)
    args = {"old_log_prob": -jnp.ones(shape), "rollout_log_prob": -jnp.ones(shape),
            "response_mask": jnp.ones(shape), **arrays}
    return _llm("corrections").rollout_correction(_llm("train").correction_preset(preset),
                                                   **args)


PYTHON_CASES += [
    # silent non-finite values in the API
    ("ensemble_pp(prior_mean with nan)",
     lambda: _linear("ensemble_pp_posterior", noise_std=1.0, prior_mean=np.array([NAN, 0.0, 0.0])),
     "prior_mean: expected finite values, got NaN or inf at index [0]"),
    ("ensemble_pp(prior_cov with inf)",
     lambda: _linear("ensemble_pp_posterior", noise_std=1.0,
                     prior_cov=np.diag([1.0, INF, 1.0]).astype(np.float32)),
     "prior_cov: expected finite values"),
    ("exact_posterior(prior_mean with inf)",
     lambda: _linear("exact_posterior", noise_std=1.0, prior_mean=np.array([0.0, INF, 0.0])),
     "prior_mean: expected finite values"),
    ("aggregate_loss(nan loss)",
     lambda: _llm("objectives").aggregate_loss(jnp.array([[1.0, NAN]]), mask=jnp.ones((1, 2)),
                                               agg="token-mean"),
     "loss_mat: expected finite values, got NaN or inf at index [0, 1]"),
    ("returns_to_go(nan rewards)",
     lambda: _llm("baselines").returns_to_go(token_rewards=jnp.array([[[0.0, NAN]]]),
                                             response_mask=jnp.ones((1, 1, 2))),
     "token_rewards: expected finite values"),
    ("log_prob_and_sum_sq(nan logits)",
     lambda: _llm("baselines").log_prob_and_sum_sq(jnp.full((1, 2, 5), NAN),
                                                   jnp.zeros((1, 2), jnp.int32)),
     "logits: expected finite values"),
    # out-of-range discrete inputs
    ("log_prob_and_sum_sq(tokens = 7 with V = 5)",
     lambda: _llm("baselines").log_prob_and_sum_sq(jnp.zeros((1, 2, 5)),
                                                   jnp.array([[0, 7]], jnp.int32)),
     "tokens: expected integers in [0, 4], got 7"),
    ("log_prob_and_sum_sq(token -1)",
     lambda: _llm("baselines").log_prob_and_sum_sq(jnp.zeros((1, 2, 5)),
                                                   jnp.array([[0, -1]], jnp.int32)),
     "tokens: expected integers in [0, 4], got -1"),
    ("topk_bucket_kl(ids outside the vocabulary)",
     lambda: _llm("corrections").topk_bucket_kl(
         rollout_topk_log_probs=jnp.log(jnp.full((1, 1, 2), 0.4)),
         rollout_topk_ids=jnp.array([[[1, 9]]], jnp.int32), train_logits=jnp.zeros((1, 1, 5))),
     "rollout_topk_ids: expected integers in [0, 4], got 9"),
    ("exact_ts learner update arm=7 of 4",
     lambda: _learner_update(_bandits()[0].exact_ts(), 1.0, arm=7),
     "arm: expected integers in [0, 3], got 7"),
    ("exact_ts learner update arm=-1",
     lambda: _learner_update(_bandits()[0].exact_ts(), 1.0, arm=-1),
     "arm: expected integers in [0, 3], got -1"),
    ("ensemble_pp learner update_batch arms with 4 of 4",
     lambda: (lambda lrn: lrn.update_batch(
         lrn.init(jax.random.PRNGKey(0), __import__("hyperx.bandits.base", fromlist=["x"])
                  .BanditSpec(4, 3, 10)), jax.random.PRNGKey(1), jnp.ones((2, 3)),
         jnp.array([0, 4], jnp.int32), jnp.ones(2)))(_bandits()[0].ensemble_pp(4)),
     "arms: expected integers in [0, 3], got 4"),
    ("linucb (fixed arms) update arm=4 of 4",
     lambda: (lambda lrn: lrn.update(
         lrn.init(jax.random.PRNGKey(0), __import__("hyperx.bandits.base", fromlist=["x"])
                  .BanditSpec(4, 3, 10, True, jnp.eye(4, 3))), jax.random.PRNGKey(1),
         jnp.ones(3), jnp.int32(4), jnp.float32(1.0)))(_bandits()[0].linucb()),
     "arm: expected integers in [0, 3], got 4"),
    # misuse of the corrections
    ("rollout_correction(log-probs > 0)",
     lambda: _correction("token_tis", old_log_prob=jnp.array([[-1.0, 0.7]])),
     "old_log_prob: expected log-probabilities <= 0 (probabilities <= 1), got 0.7 at index "
     "[0, 1]"),
    ("policy_loss(log_prob = 2)",
     lambda: _llm("objectives").policy_loss(
         _llm("objectives").ObjectiveConfig(), log_prob=jnp.full((1, 2), 2.0),
         old_log_prob=-jnp.ones((1, 2)), advantages=jnp.ones((1, 2)), mask=jnp.ones((1, 2))),
     "log_prob: expected log-probabilities <= 0"),
    ("topk_bucket_kl(positive top-k log-probs)",
     lambda: _llm("corrections").topk_bucket_kl(
         rollout_topk_log_probs=jnp.full((1, 1, 2), 0.5),
         rollout_topk_ids=jnp.array([[[1, 2]]], jnp.int32), train_logits=jnp.zeros((1, 1, 5))),
     "rollout_topk_log_probs: expected log-probabilities <= 0"),
    # deep errors instead of named ones
    ("ensemble_pp(...).init(0)",
     lambda: _linear("ensemble_pp_posterior", noise_std=1.0).init(0),
     "key: expected one PRNG key (jax.random.key(seed) or jax.random.PRNGKey(seed)), got int 0"),
    ("ensemble_pp sample with a batch of keys",
     lambda: (lambda m: m.sample(m.init(jax.random.key(0)), jax.random.split(
         jax.random.key(1), 3)))(_linear("ensemble_pp_posterior", noise_std=1.0)),
     "key: expected one PRNG key"),
    ("a d = 4 state passed to a d = 3 model",
     lambda: _linear("ensemble_pp_posterior", noise_std=1.0).update(
         _linear_module().ensemble_pp_posterior(4, 4, noise_std=1.0).init(
             jax.random.key(0)), jax.random.key(1), jnp.ones(3), jnp.float32(1.0)),
     "state.mu: expected shape (d,) with d = 3 = (3,), got (4,)"),
    ("an M = 2 state passed to an M = 4 model",
     lambda: _linear("ensemble_pp_posterior", noise_std=1.0).sample(
         _linear_module().ensemble_pp_posterior(3, 2, noise_std=1.0).init(
             jax.random.key(0)), jax.random.key(1)),
     "state.factor: expected shape (d, M) = (3, 4) for this model, got (3, 2)"),
    ("model.sample(state, key, 2.5)",
     lambda: (lambda m: m.sample(m.init(jax.random.key(0)), jax.random.key(1), 2.5))(
         _linear("ensemble_pp_posterior", noise_std=1.0)),
     "shape: expected an int or a tuple of ints, got 2.5"),
    ("token_kl(logits of different vocabularies)",
     lambda: _llm("corrections").token_kl(rollout_logits=jnp.zeros((1, 2, 5)),
                                          train_logits=jnp.zeros((1, 2, 6))),
     "train_logits: expected shape rollout_logits.shape (one vocabulary) = (1, 2, 5), got "
     "(1, 2, 6)"),
]


def test_prior_mean_as_a_list_works():
    from hyperx.linear import ensemble_pp_posterior

    model = ensemble_pp_posterior(3, 4, noise_std=1.0, prior_mean=[1.0, 0.0, 0.0])
    np.testing.assert_allclose(np.asarray(model.init(jax.random.key(0)).mu), [1.0, 0.0, 0.0])


@pytest.mark.parametrize("name, call, message", PYTHON_CASES, ids=[c[0] for c in PYTHON_CASES])
def test_python_errors_are_one_line(name, call, message):
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    text = str(info.value)
    assert message in text and "\n" not in text, text


@pytest.mark.parametrize("case", ["state id", "action", "reward"])
def test_agent_host_calls_reject_bad_inputs(agent, case):
    made, state = agent
    key = jax.random.PRNGKey(1)
    calls = {"state id": (lambda: made.act(state, key, jnp.int32(16)),
                          "obs: expected integers in [0, 15], got 16"),
             "action": (lambda: made.observe(state, key, _transition(action=5)),
                        "transition.action: expected integers in [0, 1], got 5"),
             "reward": (lambda: made.observe(state, key, _transition(reward=NAN)),
                        "transition.reward: expected finite values")}
    call, message = calls[case]
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        call()


def test_checked_mode_reports_a_nan_inside_jit():
    """Inside jit nothing is checked by default (documented); with checked=True the jitted
    update run under hyperx.checked reports the argument by name."""
    from hyperx import checked
    from hyperx.linear import ensemble_pp_posterior

    model = ensemble_pp_posterior(3, 4, noise_std=1.0, checked=True)
    state = model.init(jax.random.PRNGKey(0))
    err, _ = checked(jax.jit(model.update))(state, jax.random.PRNGKey(1), jnp.ones(3),
                                              jnp.float32(NAN))
    with pytest.raises(Exception, match="y: expected finite values"):
        err.throw()
    unchecked = ensemble_pp_posterior(3, 4, noise_std=1.0)
    out = jax.jit(unchecked.update)(state, jax.random.PRNGKey(1), jnp.ones(3), jnp.float32(NAN))
    assert np.isnan(np.asarray(out.mu)).all()


def test_checked_mode_reports_an_arm_out_of_range_inside_jit():
    """exact_ts(checked=True) under hyperx.checked names an out-of-range traced arm; the
    default learner does not check traced arms (the arm does not enter its posterior)."""
    from hyperx import checked
    from hyperx.bandits import exact_ts
    from hyperx.bandits.base import BanditSpec

    for arm in (4, -1):
        learner = exact_ts(checked=True)
        state = learner.init(jax.random.PRNGKey(0), BanditSpec(4, 3, 10))
        err, _ = checked(jax.jit(learner.update))(state, jax.random.PRNGKey(1), jnp.ones(3),
                                                  jnp.int32(arm), jnp.float32(1.0))
        with pytest.raises(Exception, match=r"arm: expected integers in \[0, 3\]"):
            err.throw()
    err, _ = checked(jax.jit(learner.update))(state, jax.random.PRNGKey(1), jnp.ones(3),
                                              jnp.int32(3), jnp.float32(1.0))
    err.throw()


def test_the_table_covers_the_issue():
    assert len(CLI_CASES) + len(PYTHON_CASES) + 3 >= 35


def test_sizes_are_refused_before_the_output_directory_is_touched(tmp_path, capsys):
    out = tmp_path / "never"
    with pytest.raises(SystemExit):
        main(["bandit", "--dim", "100", "--arms", "4", "--steps", "5", "--seeds", "1",
              "--agents", "ensemble_pp:M=1e9", "--quiet", "--out", str(out)])
    assert "needs an estimated" in capsys.readouterr().err and not out.exists()
    assert list(tmp_path.iterdir()) == []  # the --out probe left nothing behind


def test_a_read_only_out_is_named_before_the_disk_estimate(tmp_path, capsys):
    read_only = tmp_path / "ro"
    read_only.mkdir()
    read_only.chmod(0o555)
    if os.access(read_only, os.W_OK):
        pytest.skip("permission bits do not bind this user (root)")
    for out, message in ((read_only, "is not writable"),
                         (read_only / "new", "cannot create directory")):
        with pytest.raises(SystemExit):
            main([*TINY_BANDIT, "--out", str(out)])
        err = capsys.readouterr().err
        assert err.startswith("hyperx: error: --out: ") and message in err, err


@pytest.mark.parametrize("overrides, error, message", [
    (dict(gamma=True), TypeError, "gamma: expected a number, got True"),
    (dict(learning_rate=False), TypeError, "learning_rate: expected a number"),
    (dict(torso_widths=64), ValueError, "torso_widths: expected a non-empty tuple"),
    (dict(torso_widths=()), ValueError, "torso_widths: expected a non-empty tuple"),
    (dict(epinet_hiddens=(15, 2.5)), ValueError, "epinet_hiddens: expected an integer")])
def test_agent_config_refuses_bools_as_numbers_and_bare_widths(overrides, error, message):
    with pytest.raises(error, match=message):
        get_config("dqn", **overrides)
    assert get_config("dqn", torso_widths=[32, 32]).torso_widths == (32, 32)


@pytest.mark.parametrize("build, message", [
    (lambda: RLConfig(group_size=2.5), "group_size: expected an integer"),
    (lambda: RLConfig(prompts_per_step=True), "prompts_per_step: expected an integer"),
    (lambda: RLConfig(lag=1.5), "lag: expected an integer"),
    (lambda: Task("reverse", 2.5), "difficulty: expected an integer"),
    (lambda: make_policy(Task("reverse", 3), d_model=0), "d_model: expected an integer"),
    (lambda: make_policy(Task("reverse", 3), num_layers=0), "num_layers: expected an integer"),
    (lambda: make_policy(Task("reverse", 3), d_model=30, num_heads=4),
     "d_model: expected a multiple of num_heads = 4")])
def test_llm_sizes_are_integers_checked_at_the_boundary(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_agent_and_atari_sizes_are_integers():
    with pytest.raises(ValueError, match="num_actions: expected an integer"):
        make_agent(get_config("dqn"), 2.5, jnp.int32(0), num_states=4)
    with pytest.raises(ValueError, match="num_states: expected an integer"):
        make_agent(get_config("dqn"), 2, jnp.int32(0), num_states=4.0)
    with pytest.raises(ValueError, match="num_envs: expected an integer"):
        make_atari("Breakout", num_envs=2.5)
    with pytest.raises(ValueError, match="noop_max: expected an integer"):
        make_atari("Breakout", noop_max=-1)


@pytest.mark.parametrize("call, message", [
    (lambda: _rl().train(None, None, None, 2.5), "^steps: expected an integer in [0,"),
    (lambda: _rl().train(None, None, None, -1), "^steps: expected an integer in [0,"),
    (lambda: _rl().supervised_warmup(None, None, None, None, steps=2.5), "^steps: expected"),
    (lambda: _rl().supervised_warmup(None, None, None, None, steps=3, batch_size=8.0),
     "^batch_size: expected an integer"),
    (lambda: _rl().evaluate(None, None, None, None, n=0.5), "^n: expected an integer"),
    (lambda: train_atari(get_config("dqn"), "Pong", steps=64.5), "^steps: expected an integer"),
    (lambda: train_atari(get_config("dqn"), "Pong", steps=64, envs_per_seed=2.0),
     "^envs_per_seed: expected an integer"),
    (lambda: train_atari(get_config("dqn"), "Pong", steps=64, eval_every=16.5),
     "^eval_every: expected an integer"),
    (lambda: train_atari(get_config("dqn"), "Pong", steps=64, chunk_steps=True),
     "^chunk_steps: expected an integer"),
    (lambda: train_atari(get_config("dqn"), "Pong", steps=64, eval_episodes=1.5),
     "^eval_episodes: expected an integer"),
    (lambda: train_deepsea(get_config("dqn"), 4, 2.5), "^num_episodes: expected an integer"),
], ids=["train 2.5", "train -1", "warmup steps", "warmup batch", "evaluate n", "atari steps",
        "atari envs", "atari eval_every", "atari chunk bool", "atari eval episodes",
        "deepsea episodes"])
def test_trainers_refuse_a_non_integer_step_count_at_the_boundary(call, message):
    """Before any program is built or environment opened: a fractional count would otherwise
    reach ``range()`` or a shape deep inside, or be rounded without a word."""
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        call()


@pytest.mark.parametrize("manifest", ["[]", '{"command": "bandit"}',
                                      '{"command": "bandit", "settings": null}', "{not json"])
def test_a_damaged_run_json_is_a_one_line_error(tmp_path, capsys, manifest):
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text(manifest)
    for extra in (["--resume"], []):
        with pytest.raises(SystemExit) as err:
            main(["bandit", "--dim", "2", "--arms", "2", "--steps", "5", "--seeds", "1",
                  "--agents", "linucb", "--quiet", "--out", str(out), *extra])
        lines = capsys.readouterr().err.strip().splitlines()
        assert err.value.code == 2 and len(lines) == 1 and "--" in lines[0], lines
        assert "missing" not in lines[0], lines  # run.json is there (damaged or incomplete)


def _plot_error(capsys, directory) -> str:
    with pytest.raises(SystemExit) as err:
        main(["plot", str(directory)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert err.value.code == 2 and len(lines) == 1, lines
    return lines[0]


BANDIT_HEADER = "agent,config,seed,t,regret\n"
GAMES_HEADER = "matchup,player,learner,seed,t,regret\n"


@pytest.mark.parametrize("name, text, needle", [
    ("regret.csv", "a,b,c\n1,2,3\n", "expected the header"),
    ("regret.csv", BANDIT_HEADER, "holds no rows"),
    ("regret.csv", BANDIT_HEADER + "linucb,,0,1,0.5\nlinucb,,0,2\n", "line 3"),
    ("regret.csv", BANDIT_HEADER + "linucb,,0,1,zero\n", "line 2"),
    ("regret.csv", BANDIT_HEADER + "linucb,,0,1,0.5\nlinucb,,0,2,0.7\nlinucb,,1,1,0.4\n",
     "not a whole number of seeds"),
    ("regret.csv", GAMES_HEADER + "a:b,1,a,0,1,0.5\na:b,1,a,0,2\n", "line 3"),
    ("regret.csv", GAMES_HEADER, "holds no rows"),
    ("returns.csv", "seed,episode,return,bad\n0,1,x,0\n", "not numbers"),
    ("returns.csv", "seed,episode,return,bad\n", "found none"),
    ("returns.csv", "seed,episode,return,bad\n0,1000000000000,1.0,0\n", "not one run's table"),
    ("returns.csv", "seed,episode,return,bad\n-1,1,1.0,0\n", "seeds must be integers"),
    ("returns.csv", "x,y\n0,1\n", "expected the header"),
])
def test_plot_of_a_damaged_file_is_one_line(tmp_path, capsys, name, text, needle):
    (tmp_path / name).write_text(text)
    assert needle in _plot_error(capsys, tmp_path)


def test_plot_with_a_summary_that_is_not_json_is_one_line(tmp_path, capsys):
    (tmp_path / "regret.csv").write_text(BANDIT_HEADER + "linucb,,0,1,0.5\n")
    (tmp_path / "summary.json").write_text("{cut")
    assert "summary.json: not JSON" in _plot_error(capsys, tmp_path)
    (tmp_path / "summary.json").write_text('{"env_name": "russo", "dim": 2, "arms": 3, '
                                           '"seeds": 1}')
    assert main(["plot", str(tmp_path)]) == 0


ATARI = ["atari", "--game", "Pong", "--agent", "dqn", "--steps", "64", "--quiet"]


def test_atari_resume_without_checkpoint_is_refused(tmp_path, capsys):
    """The one lifecycle's rule, as for every command: --resume with no run in --out names
    the missing run.json; into an unfinished run made without --checkpoint, the option."""
    from hyperx.commands._rundir import write_manifest

    out = tmp_path / "run"
    with pytest.raises(SystemExit) as err:
        main([*ATARI, "--out", str(out), "--resume"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert err.value.code == 2 and len(lines) == 1 and "run.json missing" in lines[0]
    args = build_parser().parse_args([*ATARI, "--out", str(out)])
    from hyperx.commands.atari import NOT_SETTINGS, _validate

    _validate(args)  # the settings as the command saves them (one game: its name)
    out.mkdir()
    write_manifest(out, "atari", {k: v for k, v in vars(args).items() if k not in NOT_SETTINGS})
    with pytest.raises(SystemExit) as err:
        main([*ATARI, "--out", str(out), "--resume"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert err.value.code == 2 and len(lines) == 1 and "without --checkpoint" in lines[0]


def test_a_refused_atari_run_leaves_nothing_behind(tmp_path, capsys, monkeypatch):
    import hyperx.agents.atari as atari

    def refuse(*args, **kwargs):
        raise ValueError("game: Pong is not installed")

    monkeypatch.setattr(atari, "train_atari", refuse)
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as err:
        main([*ATARI, "--out", str(out)])
    assert err.value.code == 2 and "not installed" in capsys.readouterr().err
    assert list(out.iterdir()) == []


def test_summaries_never_hold_infinity(tmp_path):
    import json
    from types import SimpleNamespace

    from hyperx.agents.config import get_config
    from hyperx.commands._rundir import json_safe
    from hyperx.commands.atari import write_summary

    assert json_safe({"a": [1.0, float("-inf")], "b": float("nan"), "c": 2}) == {
        "a": [1.0, None], "b": None, "c": 2}
    result = SimpleNamespace(episodes=[], evaluations=[], steps_done=0,
                             best={"score": float("-inf"), "env_step": None},
                             env_steps_per_s=0.0, compile_time_s=0.0, replay_bytes=0)
    args = build_parser().parse_args([*ATARI, "--eval-episodes", "0", "--out", "x"])
    summary = write_summary(tmp_path, result, args, get_config("dqn", env="atari"))
    assert summary["best"]["score"] is None
    assert json.loads((tmp_path / "summary.json").read_text())["best"]["score"] is None


def test_counts_accept_the_same_spellings():
    # --arms takes 1e3 as --steps does (both positive ints, scientific notation allowed).
    args = build_parser().parse_args(["bandit", "--arms", "1e3", "--steps", "1e3", "--out", "x"])
    assert args.arms == 1000 and args.steps == 1000


# every allocation a user's number drives is estimated before it is made.
# The estimates are compared with a 16 GB machine (``small_machine``), so each case is refused
# here and on a larger machine alike, in milliseconds, and nothing is allocated.
GB16 = 16 * 10**9


@pytest.fixture
def small_machine(monkeypatch):
    """Every memory estimate sees 16 GB of host and device memory."""
    import sys

    import hyperx._validation as validation

    modules = [validation, *(m for n, m in list(sys.modules.items())
                             if n.startswith("hyperx") and m is not None)]
    for module in modules:
        for name in ("host_memory_bytes", "device_memory_bytes"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, lambda: GB16)


def _rl():
    from hyperx.llm import train

    return train


def _policy_lms(task):
    return _rl().transformer_lms(_rl().policy_module(task), "bfloat16")


MEMORY_PYTHON_CASES = [
    ("ensemble_pp(30, 10**9)",
     lambda: _linear_module().ensemble_pp_posterior(30, 10**9, noise_std=1.0),
     "dim = 30, index_dim = 1000000000: needs an estimated 240 GB of device memory for the "
     "model state"),
    ("ensemble_pp sample shape (10**9, 10)",
     lambda: (lambda m: m.sample(m.init(jax.random.key(0)), jax.random.key(1), (10**9, 10)))(
         _linear("ensemble_pp_posterior", noise_std=1.0)),
     "shape = (1000000000, 10): needs an estimated"),
    ("make_bandit_env('russo', dim=100, num_arms=10**8)",
     lambda: __import__("hyperx.envs.bandits", fromlist=["x"]).make_bandit_env(
         "russo", dim=100, num_arms=10**8),
     "num_arms = 100000000, dim = 100: needs an estimated 40.4 GB of device memory"),
    ("make_bandit_env('quadratic', num_candidates=10**9)",
     lambda: __import__("hyperx.envs.bandits", fromlist=["x"]).make_bandit_env(
         "quadratic", num_candidates=10**9),
     "num_candidates = 1000000000, dim = 100: needs an estimated"),
    ("make_agent(hyperagent, index_dim=10**9)",
     lambda: make_agent(get_config("hyperagent", index_dim=10**9), num_actions=2,
                        obs_example=jnp.int32(0), num_states=16, step_budget=64),
     "hyperagent with index_dim = 1000000000 and 64 replay slots"),
    ("make_agent(ensemble_plus, index_dim=10**6): its support",
     lambda: make_agent(get_config("ensemble_plus", index_dim=10**6), num_actions=2,
                        obs_example=jnp.int32(0), num_states=16, step_budget=64),
     "index_dim = 1000000: needs an estimated 4 TB of device memory for the 1,000,000 support "
     "points"),
    ("make_agent(dqn, buffer_size=2 * 10**9)",
     lambda: make_agent(get_config("dqn", buffer_size=2 * 10**9), num_actions=2,
                        obs_example=jnp.int32(0), num_states=16),
     "dqn with index_dim = 1 and 2,000,000,000 replay slots"),
    ("make_index('one_hot', 10**6).support()",
     lambda: __import__("hyperx.index", fromlist=["x"]).make_index("one_hot", 10**6).support(),
     "dim = 1000000: needs an estimated 4 TB"),
    ("make_policy(d_model=10**6)",
     lambda: make_policy(Task("addition", 2), d_model=10**6),
     "d_model = 1000000, num_layers = 2: needs an estimated"),
    ("make_trainer(prompts_per_step=2**31 - 1)",
     lambda: _rl().make_trainer(*_policy_lms(Task()), Task(), RLConfig(prompts_per_step=2**31 - 1)),
     "prompts_per_step x group_size = 2147483647 x 8: needs an estimated"),
    ("evaluate(Task('reverse', 100000))",
     lambda: _rl().evaluate(_policy_lms(Task("reverse", 100000))[0], None,
                            Task("reverse", 100000), jax.random.key(0)),
     "n = 256: needs an estimated"),
    ("supervised_warmup(Task('reverse', 100000))",
     lambda: _rl().supervised_warmup(_policy_lms(Task("reverse", 100000))[0], None,
                                     Task("reverse", 100000), jax.random.key(0), steps=3),
     "steps = 3, batch_size = 64: needs an estimated"),
    ("log_grid(2**31 - 1, 2**31 - 1)",
     lambda: __import__("hyperx.loop", fromlist=["x"]).log_grid(2**31 - 1, 2**31 - 1),
     "num = 2147483647: needs an estimated 68.7 GB of host memory"),
    ("run_bandit(num_seeds=2**31 - 1)",
     lambda: __import__("hyperx.bandits.runner", fromlist=["x"]).run_bandit(
         __import__("hyperx.envs.bandits", fromlist=["x"]).russo(3, 4),
         _bandits()[1].uniform_random(), horizon=10, num_seeds=2**31 - 1),
     "num_seeds = 2147483647: needs an estimated"),
    ("run_linear_demo(seeds=2**31 - 1)",
     lambda: __import__("hyperx.demos.linear", fromlist=["x"]).run_linear_demo(seeds=2**31 - 1),
     "seeds = 2147483647, index_dim = 16, dim = 20, steps = 1000"),
]


@pytest.mark.parametrize("name, call, message", MEMORY_PYTHON_CASES,
                         ids=[c[0] for c in MEMORY_PYTHON_CASES])
def test_sizes_that_cannot_fit_are_refused_with_the_estimate(small_machine, name, call,
                                                             message):
    with pytest.raises(ValueError) as info:
        call()
    text = str(info.value)
    assert message in text and "more than the 16 GB available" in text and "\n" not in text, text


MEMORY_CLI_CASES = [
    (["llm", "--d-model", "1000000"],
     "--d-model 1000000, --layers 2: needs an estimated 360 TB of device memory"),
    (["llm", "--prompts", "2147483647"],
     "--prompts 2147483647 x --group-size 8: needs an estimated"),
    (["llm", "--task", "reverse", "--difficulty", "100000"],
     "--task reverse --difficulty 100000 (200,005 tokens per sequence)"),
    (["demo", "--index-dim", "1000000000"], "--index-dim 1000000000, --dim 20, --steps 1000 "
                                            "(160 GB per seed): needs an estimated"),
    (["demo", "--seeds", "2147483647"], "--seeds 2147483647, --index-dim 16"),
    (["bandit", "--points", "2147483647", "--steps", "2147483647", "--dim", "3", "--arms", "4",
      "--agents", "linucb"], "--points 2147483647: needs an estimated 68.7 GB"),
]


@pytest.mark.parametrize("argv, message", MEMORY_CLI_CASES,
                         ids=[" ".join(a)[:60] for a, _ in MEMORY_CLI_CASES])
def test_command_sizes_that_cannot_fit_are_one_line_before_out(small_machine, tmp_path, capsys,
                                                               argv, message):
    out = tmp_path / "o"
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("hyperx: error: ") and err.count("\n") == 1, err
    assert message in err and "more than the 16 GB available" in err, err
    assert not out.exists()


def test_an_epoch_count_is_bounded_on_the_command_line(capsys):
    # epochs are time, not memory (the update's memory no longer grows with them), but they
    # run in one compiled call that Ctrl-C cannot stop
    with pytest.raises(SystemExit):
        build_parser().parse_args(["llm", "--ppo-epochs", "2147483647", "--out", "x"])
    err = capsys.readouterr().err
    assert "argument --ppo-epochs: expected an integer in [1, 1000]" in err and \
        err.count("\n") == 1, err
    assert build_parser().parse_args(["llm", "--ppo-epochs", "1000", "--out", "x"]).ppo_epochs \
        == 1000


def test_more_points_than_rounds_record_every_round():
    # `hyperx bandit --points 2147483647` was a 16 GB NumPy MemoryError: now every round
    from hyperx.loop import log_grid

    np.testing.assert_array_equal(log_grid(500, 2**31 - 1), np.arange(1, 501))
    args = build_parser().parse_args(["bandit", "--points", "2147483647", "--out", "x"])
    assert args.points == 2**31 - 1


def test_a_chunk_longer_than_the_run_is_one_chunk_of_the_run(monkeypatch):
    # `hyperx deepsea --chunk-steps 2147483647` hung: it compiled a scan of 2^31 steps (an
    # 8.6 GB step index, then no-op steps past the run's end); now the chunk is the run's
    import hyperx.agents.deepsea as deepsea

    chunks = []

    def first_chunk(step, carry, num_steps):
        chunks.append(num_steps)
        raise KeyboardInterrupt  # stop before compiling: the length is what is tested

    monkeypatch.setattr(deepsea, "run_scan", first_chunk)
    with pytest.raises(deepsea.TrainingInterrupted):
        deepsea.train_deepsea(get_config("dqn"), 3, 4, chunk_steps=2**31 - 1)
    assert chunks == [3 * 4]


def test_the_update_metrics_do_not_grow_with_the_epochs():
    """The PPO epochs' scan keeps the first epoch's metrics in its carry instead of stacking
    one row per epoch (2^31 epochs asked 206 GB); the jaxpr's outputs do not depend on it."""
    train = _rl()
    task = Task("reverse", 2)
    module = train.policy_module(task, d_model=16, num_layers=1, num_heads=2)
    lms = train.transformer_lms(module, "float32")
    params = jax.eval_shape(module.init, jax.random.key(0), jnp.zeros((1, 4), jnp.int32))
    sizes = []
    for epochs in (1, 10**6):
        trainer = train.make_trainer(*lms, task, RLConfig(prompts_per_step=2, group_size=2,
                                                          ppo_epochs=epochs))
        state = jax.eval_shape(trainer.init, params)
        batch = jax.eval_shape(trainer.rollout, params, jax.random.key(0))
        scores = jax.eval_shape(trainer.score, params, batch)
        jaxpr = jax.make_jaxpr(trainer.update)(state, batch, scores)
        sizes.append(max(math.prod(v.aval.shape) for eqn in jaxpr.eqns for v in eqn.outvars
                         if hasattr(v.aval, "shape")))
    assert sizes[0] == sizes[1], sizes
