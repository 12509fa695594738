"""Text-feature bandit: block or publish a text, features from a frozen causal LM's hidden state.

The Ensemble++ paper's hate-speech bandit (Y. Li et al., "Scalable Exploration via Ensemble++",
arXiv:2407.13195; the authors' ``env/nlp_dataset.py``): a text arrives, the learner either
blocks it (arm 0) or publishes it (arm 1). With the reference's rewards (``rewards="reference"``)

    r(block) = 0.5,    r(publish) = +1 if the text is benign, -0.5 if it is hateful,

so blocking is right exactly for hateful texts; ``rewards="correct"`` gives 1 for the correct
decision and 0 otherwise. Rewards are noiseless, so the round's expected rewards are the rewards.

Features. Each text is tokenized, run once through a transformers Flax causal LM
(``FlaxAutoModelForCausalLM``: GPT-2, Llama, ...; transformers 4.x, from a local
``save_pretrained`` directory or a hub name already in the local cache) and pooled from the final
hidden state h_L (after the final layer norm): ``pooling="last"`` takes the last real token's
h_L (the reference's ``last_token=1``), ``pooling="mean"`` the mask-weighted mean over tokens.
The features are computed once per data set and cached in ``cache_dir`` (by default
:func:`default_cache_dir`) as an ``.npz`` keyed by the model (path or name, its ``config.json``
and weight files' sizes and times), the pooling and a hash of the token ids (so of the texts and
the tokenizer). The arm features are then built from the text's feature x in R^p as in the
classification games (:func:`hyperx.envs.bandits.classification`): ``disjoint``
x_k = e_k kron x (dimension 2p, for linear learners) or ``concat`` x_k = [x, e_k] (dimension
p + 2, for neural learners).

Rounds. Each round draws one text uniformly with replacement. The reference offers a batch of
32 texts per round with the model fixed within the batch and sums their regrets; that is 32 of
our rounds with ``run_bandit(..., update_every=32)``. Unlike the reference, the LM is frozen
(the reference fine-tunes it with the head, ``fine_tune=1``): features are a fixed function of
the text, which is what makes them cacheable and the whole run one compiled program.

Data: a CSV file (columns ``text_column`` and ``label_column``), a folder saved by
``datasets.save_to_disk`` (needs the ``datasets`` package), or a ``(texts, labels)`` pair.
``make_bandit_env("text", data=..., model=..., ...)`` builds the game by name.
A text is hateful when its label is > ``threshold`` (0.5): 0/1 labels with 1 = hateful, or the
reference's ``hate_speech_score`` (publish is right for score <= 0.5).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from hyperx._validation import check_choice, check_flag, check_int, check_range
from hyperx.envs.bandit_base import (
    ENCODINGS,
    BanditEnv,
    Round,
    arm_features,
    gaussian_reward,
    no_state,
    standardize_columns,
)

Array = jax.Array
Tokenizer = Callable[[str], Sequence[int]]

BLOCK, PUBLISH = 0, 1
_LABEL_COLUMNS = ("label", "hate_speech_score")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json")
CacheDir = str | os.PathLike | None


def default_cache_dir() -> str:
    """Where the features are cached by default: ``$HYPERX_CACHE_DIR/text_features``, else
    ``$XDG_CACHE_HOME/hyperx/text_features``, else ``~/.cache/hyperx/text_features``."""
    root = os.environ.get("HYPERX_CACHE_DIR")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(xdg, "hyperx")
    return os.path.join(root, "text_features")


def _cache_path(cache_dir: CacheDir) -> str | None:
    """``cache_dir`` as a folder: ``"default"`` -> :func:`default_cache_dir`; None: no cache."""
    if cache_dir is None:
        return None
    if isinstance(cache_dir, str) and cache_dir == "default":
        return default_cache_dir()
    if not isinstance(cache_dir, (str, os.PathLike)):
        raise TypeError(f"cache_dir: expected a folder path, 'default' or None, got "
                        f"{type(cache_dir).__name__}")
    return os.fspath(cache_dir)


def _check_model(model: Any) -> str:
    if not isinstance(model, (str, os.PathLike)) or not os.fspath(model):
        raise ValueError(f"model: expected a transformers Flax causal LM folder or a cached hub "
                         f"name, got {model!r}")
    return os.fspath(model)


def load_texts(
    path: str | os.PathLike, *, text_column: str = "text", label_column: str | None = None,
    threshold: float = 0.5, split: str = "train",
) -> tuple[list[str], np.ndarray]:
    """Texts and hateful flags (bool (N,)) from a CSV file or a ``datasets`` folder.

    ``label_column=None`` takes the first of ``label`` and ``hate_speech_score`` present; a text
    is hateful when its label is > ``threshold``. A ``datasets`` folder holding a
    ``DatasetDict`` uses its ``split``.
    """
    check_range("threshold", threshold)
    path = os.fspath(path)
    if os.path.isdir(path):
        try:
            import datasets
        except ImportError as err:
            raise ImportError(f"path: {path!r} is a folder; reading a datasets folder needs the "
                              "datasets package (or pass a CSV file)") from err
        data = datasets.load_from_disk(path)
        if isinstance(data, datasets.DatasetDict):
            check_choice("split", split, tuple(data))
            data = data[split]
        columns, rows = list(data.column_names), None
    elif os.path.isfile(path):
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            columns = list(reader.fieldnames or [])
    else:
        raise ValueError(f"path: expected a CSV file or a datasets folder, got {path!r}")
    if label_column is None:
        label_column = next((c for c in _LABEL_COLUMNS if c in columns), None)
        if label_column is None:
            raise ValueError(f"label_column: none of {list(_LABEL_COLUMNS)} in the columns "
                             f"{columns}; name one")
    for name, column in (("text_column", text_column), ("label_column", label_column)):
        if column not in columns:
            raise ValueError(f"{name}: {column!r} is not one of the columns {columns}")
    texts_raw = [r[text_column] for r in rows] if rows is not None else data[text_column]
    labels_raw = [r[label_column] for r in rows] if rows is not None else data[label_column]
    return _as_texts_labels(texts_raw, labels_raw, threshold)


def _as_texts_labels(texts: Sequence[Any], labels: Sequence[Any],
                     threshold: float) -> tuple[list[str], np.ndarray]:
    if len(texts) != len(labels):
        raise ValueError(f"labels: expected one per text ({len(texts)}), got {len(labels)}")
    if len(texts) == 0:
        raise ValueError("texts: expected at least one text, got none")
    out = []
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not text:
            raise ValueError(f"texts: text {i} is not a non-empty string: {text!r}")
        out.append(text)
    values = np.empty(len(labels), np.float64)
    for i, label in enumerate(labels):
        try:
            values[i] = float(label)
        except (TypeError, ValueError):
            raise ValueError(f"labels: label {i}: expected a number, got {label!r}") from None
    if not np.all(np.isfinite(values)):
        raise ValueError(f"labels: label {int(np.argmin(np.isfinite(values)))} is not finite")
    return out, values > threshold


def _load_model(model: str | os.PathLike, dtype: Any):
    from transformers import FlaxAutoModelForCausalLM

    name = os.fspath(model)
    try:
        return FlaxAutoModelForCausalLM.from_pretrained(name, dtype=dtype, _do_init=False)
    except (OSError, ValueError, KeyError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"model: cannot load {name!r} as a transformers Flax causal LM (a "
                         f"save_pretrained folder or a cached hub name): {first}") from None


def _model_id(model: str | os.PathLike) -> dict[str, Any]:
    """What the cache key knows of the model: its path or name and its files' sizes and times."""
    name = os.fspath(model)
    if not os.path.isdir(name):
        return {"name": name}
    files = {}
    for entry in sorted(os.listdir(name)):
        full = os.path.join(name, entry)
        if os.path.isfile(full) and (entry == "config.json" or entry.endswith(
                (".msgpack", ".safetensors", ".bin"))):
            st = os.stat(full)
            files[entry] = [st.st_size, st.st_mtime_ns]
    return {"path": os.path.abspath(name), "files": files}


def _tokenizer(model: str | os.PathLike, tokenizer: str | Tokenizer | None,
               vocab_size: int) -> tuple[Tokenizer, str]:
    """A text -> ids function and its name for the cache key.

    ``None``: the tokenizer saved with the model (a folder with tokenizer files, or the model's
    hub name), else UTF-8 bytes as ids (needs a vocabulary of at least 256: a random model's)."""
    if callable(tokenizer):
        return tokenizer, "callable"
    name = os.fspath(model)
    if tokenizer is None:
        has_files = os.path.isdir(name) and any(
            os.path.isfile(os.path.join(name, f)) for f in _TOKENIZER_FILES)
        if not has_files and os.path.isdir(name):
            if vocab_size < 256:
                raise ValueError(f"tokenizer: the model folder {name!r} has no tokenizer and its "
                                 f"vocabulary ({vocab_size}) is too small for byte ids; pass one")
            return (lambda text: list(text.encode("utf-8"))), "bytes"
        tokenizer = name
    if not isinstance(tokenizer, str):
        raise TypeError(f"tokenizer: expected a path, a name, a callable or None, got "
                        f"{type(tokenizer).__name__}")
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(tokenizer)
    except (OSError, ValueError) as err:
        raise ValueError(f"tokenizer: cannot load {tokenizer!r}: "
                         f"{str(err).strip().splitlines()[0]}") from None
    return (lambda text: tok(text)["input_ids"]), f"hf:{tokenizer}"


def _token_ids(texts: Sequence[str], tokenize: Tokenizer, max_length: int,
               vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ids (N, L) and mask, each text truncated to its first ``max_length`` ids."""
    seqs = []
    for i, text in enumerate(texts):
        ids = [int(t) for t in tokenize(text)][:max_length]
        if not ids:
            raise ValueError(f"texts: text {i} gives no tokens")
        if min(ids) < 0 or max(ids) >= vocab_size:
            raise ValueError(f"tokenizer: text {i} gives ids outside the model's vocabulary "
                             f"[0, {vocab_size})")
        seqs.append(ids)
    length = max(len(s) for s in seqs)
    ids = np.zeros((len(seqs), length), np.int32)
    mask = np.zeros((len(seqs), length), np.int32)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = s
        mask[i, :len(s)] = 1
    return ids, mask


def text_features(
    texts: Sequence[str], model: str | os.PathLike, *, tokenizer: str | Tokenizer | None = None,
    pooling: str = "last", max_length: int = 128, batch_size: int = 32,
    cache_dir: CacheDir = "default", dtype: Any = jnp.float32,
) -> np.ndarray:
    """Pooled final hidden states (N, hidden) float32 of ``texts`` under a causal LM.

    ``pooling="last"``: h_L at each text's last token; ``"mean"``: the mean of h_L over its
    tokens. Texts are cut to ``max_length`` tokens (and to the model's maximum length). The
    result is read from / written to ``cache_dir/text_features_<key>.npz``, the key hashing the
    model (see :func:`_model_id`), the tokenizer, the pooling and the token ids, so the LM runs
    once per data set; ``cache_dir="default"`` is :func:`default_cache_dir`, None caches nothing.
    """
    model = _check_model(model)
    cache = _cache_path(cache_dir)
    check_choice("pooling", pooling, ("last", "mean"))
    check_int("max_length", max_length)
    check_int("batch_size", batch_size)
    texts, _ = _as_texts_labels(texts, [0] * len(texts), 0.5)
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(os.fspath(model))
    except (OSError, ValueError) as err:
        raise ValueError(f"model: cannot load the config of {os.fspath(model)!r}: "
                         f"{str(err).strip().splitlines()[0]}") from None
    vocab_size = int(config.vocab_size)
    limit = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings",
                                                            None)
    max_length = min(max_length, int(limit)) if limit else max_length
    tokenize, tok_name = _tokenizer(model, tokenizer, vocab_size)
    ids, mask = _token_ids(texts, tokenize, max_length, vocab_size)

    path = None
    if cache is not None:
        key = hashlib.sha256(json.dumps(
            {"model": _model_id(model), "tokenizer": tok_name, "pooling": pooling,
             "dtype": str(jnp.dtype(dtype))}, sort_keys=True).encode())
        key.update(ids.tobytes())
        key.update(mask.tobytes())
        path = os.path.join(cache, f"text_features_{key.hexdigest()[:32]}.npz")
        if os.path.isfile(path):
            with np.load(path) as cached:
                return np.asarray(cached["features"], np.float32)

    lm, params = _load_model(model, dtype)

    @jax.jit
    def pool(params, ids, mask):
        h = lm(ids, attention_mask=mask, params=params, output_hidden_states=True)
        h = h.hidden_states[-1].astype(jnp.float32)  # (B, L, hidden), after the final norm
        if pooling == "last":
            return h[jnp.arange(h.shape[0]), jnp.sum(mask, axis=1) - 1]
        m = mask[..., None].astype(jnp.float32)
        return jnp.sum(h * m, axis=1) / jnp.sum(m, axis=1)

    n = ids.shape[0]
    b = min(batch_size, n)
    pad = -n % b  # the last batch is padded with copies of the first row: one compiled shape
    ids_p = np.concatenate([ids, np.repeat(ids[:1], pad, 0)])
    mask_p = np.concatenate([mask, np.repeat(mask[:1], pad, 0)])
    out = np.concatenate([np.asarray(pool(params, ids_p[i:i + b], mask_p[i:i + b]))
                          for i in range(0, n + pad, b)])[:n]
    if path is not None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp.npz"
        np.savez(tmp, features=out)
        os.replace(tmp, path)
    return out


def text_bandit_from_features(
    features: Any, hateful: Any, *, encoding: str = "disjoint", rewards: str = "reference",
    standardize: bool = True, name: str = "text",
) -> BanditEnv:
    """The block / publish bandit on precomputed text features (N, p) and hateful flags (N,).

    Arm 0 blocks, arm 1 publishes; see the module docstring for the rewards and encodings.
    ``standardize`` scales each feature column to mean 0, std 1 (over the data set).
    """
    check_choice("encoding", encoding, ENCODINGS)
    check_choice("rewards", rewards, ("reference", "correct"))
    check_flag("standardize", standardize)
    x = np.asarray(features, np.float64)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"features: expected a non-empty (N, p) array, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("features: contains NaN or inf")
    flags = np.asarray(hateful)
    if flags.shape != (x.shape[0],) or flags.dtype != np.bool_:
        raise ValueError(f"hateful: expected a bool array of shape ({x.shape[0]},), got "
                         f"{flags.dtype} {flags.shape}")
    if standardize:
        x = standardize_columns(x)
    feats = jnp.asarray(x, jnp.float32)
    if rewards == "reference":
        table = np.where(flags[:, None], [0.5, -0.5], [0.5, 1.0])
    else:
        table = np.where(flags[:, None], [1.0, 0.0], [0.0, 1.0])
    means = jnp.asarray(table, jnp.float32)
    num, p = x.shape
    dim = 2 * p if encoding == "disjoint" else p + 2

    def observe(env_state: Array, key: Array, t: Array) -> Round:
        del env_state, t
        i = jax.random.randint(key, (), 0, num)
        return Round(arm_features(feats[i], 2, encoding), means[i])

    return BanditEnv(name, 2, dim, False, no_state, observe, gaussian_reward(0.0))


def text_bandit(
    data: str | os.PathLike | tuple[Sequence[str], Sequence[Any]], model: str | os.PathLike, *,
    text_column: str = "text", label_column: str | None = None, threshold: float = 0.5,
    tokenizer: str | Tokenizer | None = None, pooling: str = "last", max_length: int = 128,
    batch_size: int = 32, cache_dir: CacheDir = "default",
    encoding: str = "disjoint", rewards: str = "reference", standardize: bool = True,
) -> BanditEnv:
    """The hate-speech block / publish bandit on ``data`` with features from ``model``.

    ``data``: a CSV file or ``datasets`` folder (:func:`load_texts`) or a ``(texts, labels)``
    pair; ``model``: a transformers Flax causal LM folder or cached hub name; features by
    :func:`text_features` (cached in ``cache_dir``); the game by
    :func:`text_bandit_from_features`.
    """
    _check_model(model)
    _cache_path(cache_dir)
    check_choice("encoding", encoding, ENCODINGS)
    check_choice("rewards", rewards, ("reference", "correct"))
    if isinstance(data, tuple):
        if len(data) != 2:
            raise ValueError(f"data: expected a path or a (texts, labels) pair, got a tuple of "
                             f"{len(data)}")
        check_range("threshold", threshold)
        texts, hateful = _as_texts_labels(list(data[0]), list(data[1]), threshold)
    elif not isinstance(data, (str, os.PathLike)) or not os.path.exists(data):
        raise ValueError(f"data: expected a CSV file, a datasets folder or a (texts, labels) "
                         f"pair, got {data!r}")
    else:
        texts, hateful = load_texts(data, text_column=text_column, label_column=label_column,
                                    threshold=threshold)
    features = text_features(texts, model, tokenizer=tokenizer, pooling=pooling,
                             max_length=max_length, batch_size=batch_size, cache_dir=cache_dir)
    return text_bandit_from_features(features, hateful, encoding=encoding, rewards=rewards,
                                     standardize=standardize)
