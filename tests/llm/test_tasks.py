"""Verifiable tasks: tokenizer, prompt/answer sampling and exact rewards on hand-written cases."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hyperx.llm.tasks import EOS, PAD, TOKENIZER, Task


def _response(text: str, width: int, eos: bool = True) -> jnp.ndarray:
    ids = TOKENIZER.encode(text, eos=eos)
    return jnp.array([ids + [PAD] * (width - len(ids))], jnp.int32)


def test_tokenizer_round_trip_and_unknown_char():
    ids = TOKENIZER.encode("12+34=", bos=True, eos=True)
    assert ids[0] == 1 and ids[-1] == EOS and TOKENIZER.decode(ids) == "12+34="
    with pytest.raises(ValueError, match="text"):
        TOKENIZER.encode("12x")


@pytest.mark.parametrize(("text", "reward"), [("46", 1.0), ("47", 0.0), ("046", 0.0),
                                              ("4", 0.0), ("", 0.0)])
def test_addition_exact_reward_hand_written(text, reward):
    task = Task("addition", 2)
    answers = _response("46", task.answer_len)
    assert float(task.reward(_response(text, 6), answers)[0]) == reward
    assert task.reward_text("12+34=", text) == reward


def test_missing_eos_is_wrong_and_partial_credit():
    task = Task("addition", 2)
    answers = _response("46", task.answer_len)
    assert float(task.reward(_response("46", 6, eos=False), answers)[0]) == 0.0
    partial = Task("addition", 2, reward_type="partial")
    assert float(partial.reward(_response("47", 6), answers)[0]) == pytest.approx(2 / 3)
    assert float(partial.reward(_response("46", 6), answers)[0]) == 1.0
    assert partial.reward_text("12+34=", "47") == pytest.approx(2 / 3)


@pytest.mark.parametrize(("text", "reward"), [("46", 1.0), ("47", 2 / 3), ("467", 2 / 3),
                                              ("4646", 2 / 3), ("4", 1 / 3), ("", 0.0),
                                              ("64", 1 / 3), ("460", 2 / 3)])
def test_partial_credit_counts_the_eos_position(text, reward):
    # Against 46: the positions are 4, 6 and EOS; running past the answer loses EOS's third.
    task = Task("addition", 2, reward_type="partial")
    answers = _response("46", task.answer_len)
    assert float(task.reward(_response(text, 6), answers)[0]) == pytest.approx(reward)
    assert task.reward_text("12+34=", text) == pytest.approx(reward)


@pytest.mark.parametrize("name", ["addition", "reverse", "sort"])
def test_sampled_answers_are_the_reference_answers(name):
    for task in (Task(name, 3), Task(name, 1)):
        prompts, answers = jax.jit(task.sample, static_argnums=1)(jax.random.key(0), 64)
        assert prompts.shape == (64, task.prompt_len) and answers.shape == (64, task.answer_len)
        assert np.all(np.asarray(task.reward(answers, answers)) == 1.0)
        for p, a in zip(np.asarray(prompts)[:16], np.asarray(answers)[:16], strict=True):
            assert task.reward_text(TOKENIZER.decode(p), TOKENIZER.decode(a)) == 1.0


def test_addition_carries_and_reversed_digits():
    task = Task("addition", 2, reverse_digits=True)
    answers = _response("101", task.answer_len)  # 99 + 2 = 101 -> reversed "101"
    assert float(task.reward(_response("101", 5), answers)[0]) == 1.0
    assert task.reward_text("99+02=", "101") == 1.0
    assert task.reward_text("10+05=", "51") == 1.0
    prompts, answers = task.sample(jax.random.key(3), 32)
    for p, a in zip(np.asarray(prompts), np.asarray(answers), strict=True):
        x, y = TOKENIZER.decode(p).rstrip("=").split("+")
        assert TOKENIZER.decode(a) == str(int(x) + int(y))[::-1]


def test_difficulty_sets_response_length():
    assert [Task("addition", d).answer_len for d in (1, 2, 4)] == [3, 4, 6]
    assert Task("reverse", 5).answer_len == 6 and Task("sort", 5).prompt_len == 7


def test_bad_arguments():
    with pytest.raises(ValueError, match="task"):
        Task("division")
    with pytest.raises(ValueError, match="difficulty"):
        Task("addition", 0)
    with pytest.raises(ValueError, match="reward_type"):
        Task("addition", reward_type="fuzzy")
    with pytest.raises(ValueError, match="responses"):
        Task("addition", 2).reward(jnp.zeros((1, 2), jnp.int32), jnp.zeros((1, 4), jnp.int32))
