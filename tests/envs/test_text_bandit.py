"""The text-feature (hate-speech) bandit end to end on a tiny random GPT-2 saved to tmp_path."""

import csv
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may be downloaded

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

transformers = pytest.importorskip("transformers")

from hyperx.bandits.linear import exact_ts  # noqa: E402
from hyperx.bandits.runner import run_bandit  # noqa: E402
from hyperx.envs import make_bandit_env  # noqa: E402
from hyperx.envs import text_bandit as tb  # noqa: E402

BENIGN = ["have a nice day", "the weather is lovely", "thanks for the help", "see you soon",
          "great game last night", "I like this song"]
HATEFUL = ["you people are vermin", "get out of my country", "I hate all of them",
           "they should all disappear"]


@pytest.fixture(autouse=True)
def default_cache(tmp_path, monkeypatch):
    """The default feature cache of each test: a fresh folder, never the user's."""
    monkeypatch.setenv("HYPERX_CACHE_DIR", str(tmp_path / "hyperx_cache"))
    return tmp_path / "hyperx_cache" / "text_features"


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    config = transformers.GPT2Config(vocab_size=300, n_positions=32, n_embd=16, n_layer=1,
                                     n_head=2)
    model = transformers.FlaxGPT2LMHeadModel(config, _do_init=False)
    # a jitted init: the eager one takes ~14 s on a loaded CPU
    params = jax.jit(model.init_weights, static_argnums=1)(jax.random.PRNGKey(0), (1, 1))
    path = tmp_path_factory.mktemp("gpt2")
    model.save_pretrained(path, params=params)
    return str(path)


@pytest.fixture(scope="module")
def data_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("texts") / "hate.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["text", "hate_speech_score", "label"])
        for t in BENIGN:
            w.writerow([t, "-1.2", "0"])
        for t in HATEFUL:
            w.writerow([t, "2.5", "1"])
    return str(path)


def test_load_texts_from_csv_score_or_label(data_csv, tmp_path):
    texts, hateful = tb.load_texts(data_csv)  # "label" is taken first
    assert texts == BENIGN + HATEFUL
    np.testing.assert_array_equal(hateful, [False] * 6 + [True] * 4)
    _, by_score = tb.load_texts(data_csv, label_column="hate_speech_score")
    np.testing.assert_array_equal(by_score, hateful)
    with pytest.raises(ValueError, match="^text_column: 'body' is not one of the columns"):
        tb.load_texts(data_csv, text_column="body")
    with pytest.raises(ValueError, match="^path: expected a CSV file"):
        tb.load_texts(tmp_path / "missing.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("text,label\nhello,yes\n")
    with pytest.raises(ValueError, match="^labels: label 0: expected a number"):
        tb.load_texts(bad)


@pytest.fixture(scope="module")
def cache_dir(gpt2, data_csv, tmp_path_factory):
    """The features of the CSV's texts, computed once (batches of 4 with a padded last one)."""
    path = tmp_path_factory.mktemp("cache")
    tb.text_features(tb.load_texts(data_csv)[0], gpt2, cache_dir=path, batch_size=4)
    return path


def test_features_are_the_lm_hidden_state_and_cached(gpt2, data_csv, cache_dir, monkeypatch):
    texts, _ = tb.load_texts(data_csv)
    (cached,) = os.listdir(cache_dir)
    assert cached.endswith(".npz")
    calls = []
    load = tb._load_model
    monkeypatch.setattr(tb, "_load_model", lambda *a: calls.append(a) or load(*a))
    feats = tb.text_features(texts, gpt2, cache_dir=cache_dir, batch_size=4)
    assert feats.shape == (10, 16) and feats.dtype == np.float32 and not calls  # a cache hit
    # the last token's final hidden state of a direct, unbatched, unpadded forward pass
    model, params = load(gpt2, jnp.float32)
    ids = jnp.asarray([list(texts[7].encode())])
    h = jax.jit(lambda p, i: model(i, params=p, output_hidden_states=True)
                .hidden_states[-1][0])(params, ids)
    np.testing.assert_allclose(feats[7], h[-1], atol=1e-4)
    mean = tb.text_features(texts[6:8], gpt2, pooling="mean", batch_size=2)
    assert len(calls) == 1  # other texts and pooling: a new key, so the model is loaded
    np.testing.assert_allclose(mean[1], h.mean(0), atol=1e-4)


def test_text_bandit_rewards_and_a_learner_runs(gpt2, data_csv, cache_dir):
    env = tb.text_bandit(data_csv, gpt2, cache_dir=cache_dir)
    assert (env.num_arms, env.context_dim, env.fixed_arms) == (2, 32, False)
    st = env.init(jax.random.key(0))
    keys = jax.random.split(jax.random.key(1), 40)
    rounds, rewards = jax.jit(jax.vmap(lambda k: (
        env.observe(st, k, jnp.int32(0)),
        env.reward(st, k, env.observe(st, k, jnp.int32(0)), jnp.int32(1)))))(keys)
    assert rounds.contexts.shape == (40, 2, 32)
    np.testing.assert_array_equal(rounds.contexts[:, 0, 16:], 0)  # disjoint: e_k kron x
    np.testing.assert_array_equal(rewards, rounds.expected_rewards[:, 1])  # noiseless
    means = {tuple(m) for m in np.asarray(rounds.expected_rewards).tolist()}
    assert means == {(0.5, 1.0), (0.5, -0.5)}  # block 0.5; publish +1 benign / -0.5 hateful
    correct = tb.text_bandit_from_features(np.eye(3), np.array([True, False, True]),
                                           rewards="correct", encoding="concat")
    r = correct.observe(correct.init(jax.random.key(0)), jax.random.key(3), jnp.int32(0))
    assert correct.context_dim == 5 and sorted(np.asarray(r.expected_rewards)) == [0.0, 1.0]
    ts = run_bandit(env, exact_ts(), horizon=200, num_seeds=2)
    assert np.all(np.isfinite(ts.regret)) and np.all(ts.regret >= 0)
    # uniform play loses (0.4 * 1.0 + 0.6 * 0.5) / 2 = 0.35 a round: 70 in 200 rounds; exact TS
    # on 10 separable texts learns within a few dozen rounds
    assert ts.regret[:, -1].max() < 35, ts.regret[:, -1]


def test_bad_inputs_name_the_argument(gpt2, tmp_path):
    with pytest.raises(ValueError, match="^pooling: expected one of"):
        tb.text_features(["hi"], gpt2, pooling="max")
    with pytest.raises(ValueError, match="^model: cannot load the config"):
        tb.text_features(["hi"], str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="^texts: text 1 is not a non-empty string"):
        tb.text_features(["hi", ""], gpt2)
    with pytest.raises(ValueError, match="^tokenizer: text 0 gives ids outside"):
        tb.text_features(["hi"], gpt2, tokenizer=lambda s: [999])
    with pytest.raises(ValueError, match="^labels: expected one per text"):
        tb.text_bandit((["a", "b"], [1]), gpt2)
    with pytest.raises(ValueError, match="^hateful: expected a bool array"):
        tb.text_bandit_from_features(np.ones((3, 2)), np.array([0, 1, 0]))
    with pytest.raises(ValueError, match="^features: contains NaN"):
        tb.text_bandit_from_features(np.full((2, 2), np.nan), np.array([True, False]))
    with pytest.raises(ValueError, match="^rewards: expected one of"):
        tb.text_bandit_from_features(np.ones((2, 2)), np.array([True, False]), rewards="x")


def _count_model_loads(monkeypatch) -> list:
    calls = []
    load = tb._load_model
    monkeypatch.setattr(tb, "_load_model", lambda *a: calls.append(a) or load(*a))
    return calls


def test_registered_text_game_end_to_end_with_the_default_cache(gpt2, data_csv, cache_dir,
                                                                default_cache, monkeypatch):
    calls = _count_model_loads(monkeypatch)
    env = make_bandit_env("text", data=data_csv, model=gpt2)
    assert len(calls) == 1 and len(os.listdir(default_cache)) == 1  # computed, then cached
    again = make_bandit_env("text", data=data_csv, model=gpt2)
    assert len(calls) == 1  # the same data set: read from the cache, the LM is not run again
    direct = tb.text_bandit(data_csv, gpt2, cache_dir=cache_dir)
    assert (env.name, env.num_arms, env.context_dim) == (direct.name, 2, 32)
    keys = jax.random.split(jax.random.key(5), 20)
    for other in (again, direct):  # the same features as the ones computed in batches of 4
        np.testing.assert_allclose(*(
            jax.vmap(lambda k, e=e: e.observe(e.init(k), k, jnp.int32(0)).contexts)(keys)
            for e in (env, other)), atol=1e-5)
    concat = make_bandit_env("text", data=data_csv, model=gpt2, encoding="concat",
                             rewards="correct")
    assert concat.context_dim == 18 and len(calls) == 1  # the options reach the game
    ts = run_bandit(env, exact_ts(), horizon=100, num_seeds=2)
    assert ts.regret[:, -1].max() < 25, ts.regret[:, -1]  # uniform play loses about 35


def test_registered_text_game_names_missing_or_bad_arguments(gpt2, data_csv, tmp_path):
    with pytest.raises(ValueError, match="^data: the text game needs data="):
        make_bandit_env("text", model=gpt2)
    with pytest.raises(ValueError, match="^model: the text game needs model="):
        make_bandit_env("text", data=data_csv)
    with pytest.raises(ValueError, match="^data: expected a CSV file, a datasets folder"):
        make_bandit_env("text", data=str(tmp_path / "missing.csv"), model=gpt2)
    with pytest.raises(ValueError, match="^model: expected a transformers Flax causal LM"):
        make_bandit_env("text", data=data_csv, model=3)
    with pytest.raises(ValueError, match="^model: cannot load the config"):
        make_bandit_env("text", data=data_csv, model=str(tmp_path / "no_model"))
    with pytest.raises(TypeError, match="^cache_dir: expected a folder path"):
        make_bandit_env("text", data=data_csv, model=gpt2, cache_dir=3)
    with pytest.raises(TypeError, match="dim"):
        make_bandit_env("text", data=data_csv, model=gpt2, dim=4)


def test_cache_dir_none_runs_the_model_every_time(gpt2, default_cache, monkeypatch):
    calls = _count_model_loads(monkeypatch)
    for _ in range(2):
        tb.text_features(["hello there"], gpt2, cache_dir=None)
    assert len(calls) == 2 and not default_cache.exists()


def test_bandit_command_runs_the_text_game(gpt2, data_csv, tmp_path, capsys):
    from hyperx.commands import main

    out = tmp_path / "run"
    argv = ["--env", "text", "--data", data_csv, "--model", gpt2, "--agents", "exact_ts",
            "--steps", "20", "--seeds", "2", "--quiet", "--out", str(out)]
    assert main(["bandit", *argv]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["env_name"], summary["arms"], summary["dim"]) == ("text", 2, 32)
    for bad, needle in ((["--env", "text", "--model", gpt2], "--data"),
                        (["--env", "linear", "--data", data_csv], "--data")):
        with pytest.raises(SystemExit) as exc:
            main(["bandit", *bad, "--out", str(tmp_path / "x")])
        assert exc.value.code == 2 and needle in capsys.readouterr().err
