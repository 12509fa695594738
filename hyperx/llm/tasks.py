"""Verifiable tasks with exact rewards for RL on a small LM: addition, reversal, sorting.

Each task draws prompts in pure JAX (so a whole batch, or a supervised warm-up, can be sampled
inside ``jit``) and scores a response exactly: reward 1 iff the response is the answer followed
by ``EOS`` (``exact``), optionally with partial credit for each correct position of the answer
and its EOS (``partial``: ``(1/(|a| + 1)) sum_{i <= |a|} 1[y_i = (a, EOS)_i]``, 1 only when the
whole answer and EOS match), so a response that runs past the answer (``578`` for ``57``) loses
the EOS position's credit.
The ``difficulty`` knob sets the number of digits / characters, hence the response length:

* ``addition``: ``BOS a+b=`` with ``a, b`` zero-padded to ``d`` digits; answer ``a + b`` in
  decimal (no leading zeros), ``d`` or ``d + 1`` digits; ``reverse_digits`` writes it least
  significant digit first (easier for small transformers: Lee et al. 2023, "Teaching
  Arithmetic to Small Transformers").
* ``reverse``: ``BOS s|`` with ``s`` ``d`` letters from ``a..j``; answer ``s`` reversed.
* ``sort``: ``BOS s|`` with ``s`` ``d`` digits; answer the digits in ascending order.

Prompts of one task have one length ``P`` and answers at most ``A`` tokens (EOS included),
so batches are shape-stable. The tokenizer is character level (:class:`CharTokenizer`).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from hyperx._validation import check_choice, check_int, check_integer, check_rank

PAD, BOS, EOS = 0, 1, 2
CHARS = "0123456789+=|abcdefghij"
TASKS = ("addition", "reverse", "sort")
REWARDS = ("exact", "partial")


class CharTokenizer:
    """Character tokenizer: ids 0, 1, 2 are PAD, BOS, EOS, then one id per char of ``CHARS``."""

    pad_id, bos_id, eos_id = PAD, BOS, EOS

    def __init__(self, chars: str = CHARS) -> None:
        self.chars = chars
        self._ids = {c: i + 3 for i, c in enumerate(chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars) + 3

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]:
        """Ids of ``text``; raises ``ValueError`` naming ``text`` on an unknown character."""
        bad = sorted(set(text) - set(self._ids))
        if bad:
            raise ValueError(f"text: characters {bad} are not in the tokenizer's {self.chars!r}")
        return [BOS] * bos + [self._ids[c] for c in text] + [EOS] * eos

    def decode(self, ids) -> str:
        """Text of ``ids`` up to the first EOS, skipping PAD and BOS."""
        out = []
        for i in np.asarray(ids).tolist():
            if i == EOS:
                break
            if i >= 3:
                out.append(self.chars[i - 3])
        return "".join(out)


TOKENIZER = CharTokenizer()
_DIGIT0 = TOKENIZER.encode("0")[0]
_LETTER0 = TOKENIZER.encode("a")[0]
_PLUS, _EQ, _BAR = TOKENIZER.encode("+=|")


@dataclass(frozen=True)
class Task:
    """A verifiable task: ``sample`` prompts and answers, ``reward`` responses exactly.

    Attributes:
      name: one of ``TASKS``.
      difficulty: digits (addition) or string length (reverse, sort), >= 1.
      reward_type: ``"exact"`` or ``"partial"`` (see the module docstring).
      reverse_digits: addition only: write the sum least significant digit first.
    """

    name: str = "addition"
    difficulty: int = 2
    reward_type: str = "exact"
    reverse_digits: bool = False

    def __post_init__(self) -> None:
        check_choice("task", self.name, TASKS)
        check_choice("reward_type", self.reward_type, REWARDS)
        check_int("difficulty", self.difficulty)
        if self.name == "addition" and self.difficulty > 8:
            raise ValueError(f"difficulty: expected <= 8 digits for addition (int32 sums), "
                             f"got {self.difficulty}")

    @property
    def tokenizer(self) -> CharTokenizer:
        return TOKENIZER

    @property
    def prompt_len(self) -> int:
        """``P``: BOS, the operands and the separator."""
        d = self.difficulty
        return 2 * d + 3 if self.name == "addition" else d + 2

    @property
    def answer_len(self) -> int:
        """``A``: the longest answer plus EOS."""
        return self.difficulty + (2 if self.name == "addition" else 1)

    def sample(self, key: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
        """``n`` prompts ``[n, P]`` and answers ``[n, A]`` (answer, EOS, then PAD), int32."""
        d = self.difficulty
        if self.name == "addition":
            ka, kb = jax.random.split(key)
            a = jax.random.randint(ka, (n,), 0, 10**d)
            b = jax.random.randint(kb, (n,), 0, 10**d)
            col = lambda cols: jnp.full((n, cols), 0, jnp.int32)  # noqa: E731
            prompts = jnp.concatenate([
                col(1) + BOS, _digits(a, d) + _DIGIT0, col(1) + _PLUS,
                _digits(b, d) + _DIGIT0, col(1) + _EQ], axis=1)
            s = a + b
            width = 1 + jnp.sum(s[:, None] >= 10 ** jnp.arange(1, d + 1), axis=1)  # [n]
            digits = _digits(s, d + 1)  # most significant first, zero padded to d + 1
            if self.reverse_digits:
                digits = digits[:, ::-1]  # least significant first: valid digits lead
                shift = jnp.zeros_like(width)
            else:
                shift = d + 1 - width  # drop the leading zeros
            idx = jnp.arange(d + 2)[None, :] + shift[:, None]
            body = jnp.take_along_axis(
                jnp.concatenate([digits + _DIGIT0, jnp.zeros((n, 1), jnp.int32)], 1),
                jnp.minimum(idx, d + 1), axis=1)
            pos = jnp.arange(d + 2)[None, :]
            answers = jnp.where(pos < width[:, None], body,
                                jnp.where(pos == width[:, None], EOS, PAD))
            return prompts.astype(jnp.int32), answers.astype(jnp.int32)
        if self.name == "reverse":
            s = jax.random.randint(key, (n, d), 0, 10) + _LETTER0
            body = s[:, ::-1]
        else:
            s = jax.random.randint(key, (n, d), 0, 10) + _DIGIT0
            body = jnp.sort(s, axis=1)
        prompts = jnp.concatenate([jnp.full((n, 1), BOS), s, jnp.full((n, 1), _BAR)], axis=1)
        answers = jnp.concatenate([body, jnp.full((n, 1), EOS)], axis=1)
        return prompts.astype(jnp.int32), answers.astype(jnp.int32)

    def reward(self, responses: jax.Array, answers: jax.Array) -> jax.Array:
        """Exact reward ``[B]`` of ``responses [B, T]`` (T >= A) against ``answers [B, A]``.

        ``exact``: 1 iff the first ``A`` response tokens equal the answer (EOS included; the
        sampler pads after EOS, so nothing can follow it). ``partial``: the fraction of the
        answer's positions, EOS included, matched position by position (1 iff exact).
        """
        check_rank("responses", responses, 2)
        check_integer("responses", responses)
        check_rank("answers", answers, 2)
        b, a = answers.shape
        if responses.shape[0] != b or responses.shape[1] < a:
            raise ValueError(f"responses: expected shape (B, T) = ({b}, >= {a}), "
                             f"got {responses.shape}")
        valid = answers != PAD
        hit = (responses[:, :a] == answers) | ~valid
        exact = jnp.all(hit, axis=1).astype(jnp.float32)
        if self.reward_type == "exact":
            return exact
        frac = jnp.sum(hit & valid, axis=1) / jnp.maximum(jnp.sum(valid, axis=1), 1)
        return frac.astype(jnp.float32)

    def reward_text(self, prompt: str, response: str) -> float:
        """Pure-Python reference reward of one ``response`` to one ``prompt`` (no BOS/EOS)."""
        if self.name == "addition":
            a, b = prompt.rstrip("=").split("+")
            want = str(int(a) + int(b))
            want = want[::-1] if self.reverse_digits else want
        elif self.name == "reverse":
            want = prompt.rstrip("|")[::-1]
        else:
            want = "".join(sorted(prompt.rstrip("|")))
        if response == want:
            return 1.0
        if self.reward_type == "exact":
            return 0.0
        end = "\0"  # EOS: one more position to match
        return sum(x == y for x, y in zip(response + end, want + end, strict=False)) / (
            len(want) + 1)


def _digits(x: jax.Array, width: int) -> jax.Array:
    """Decimal digits of ``x [n]``, most significant first, zero-padded to ``width``."""
    powers = 10 ** jnp.arange(width - 1, -1, -1)
    return (x[:, None] // powers[None, :]) % 10
