"""A conditional that stays a branch under ``vmap``: for schedules that many vmapped runs
follow in lockstep (a bandit learner's training every B rounds, an agent's update every
``update_every`` env steps, the same step counter for every seed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array
from jax.custom_batching import custom_vmap

__all__ = ["lockstep_cond"]


def lockstep_cond(pred: Array, true_fn: Callable[..., Any], false_fn: Callable[..., Any],
                  *operands: Any) -> Any:
    """``lax.cond(pred, true_fn, false_fn, *operands)`` that stays a branch under ``vmap``.

    Vmapped with a batched ``pred``, ``lax.cond`` becomes a ``select``: both branches run for
    every batch member at every call, so a training step scheduled every B rounds would run
    every round. Under ``vmap`` this function branches on the whole batch instead,

        lax.cond(any(pred), lax.cond(all(pred), new, where(pred, new, vmap(false_fn))),
                 vmap(false_fn)),      with new = vmap(true_fn) computed once,

    recursively, so nested vmaps keep the branch too: each member gets its own branch's result,
    and when the members are in lockstep (a schedule that counts rounds, the same for every
    seed of a run) ``true_fn`` runs only on the calls where it is due, and alone: the
    ``where`` (which reads and writes every output of both branches) runs only when some
    members are due and others not, so let the branches return only what ``true_fn`` changes
    (not, say, a replay buffer that passes through). ``pred`` is a bool
    scalar per member; both branches return the same structure. The branches may close over
    vmapped values (a grid point's hyper-parameter, a seed's key): each is traced once and its
    closed-over values become explicit operands, which a custom vmap rule needs. Not
    differentiable (it is a custom vmap rule).
    """
    true_run, true_consts = _closure_free(true_fn, operands)
    false_run, false_consts = _closure_free(false_fn, operands)
    return _branch(pred, lambda tc, fc, *o: true_run(tc, *o),
                   lambda tc, fc, *o: false_run(fc, *o), true_consts, false_consts, *operands)


def _closure_free(fn: Callable[..., Any], operands: tuple[Any, ...]
                  ) -> tuple[Callable[..., Any], list[Any]]:
    """``fn`` as ``run(consts, *operands)`` with everything it closes over in ``consts``."""
    closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*operands)
    out_tree = jax.tree.structure(out_shape)

    def run(consts: list[Any], *ops: Any) -> Any:
        flat = jax.core.eval_jaxpr(closed.jaxpr, consts, *jax.tree.leaves(ops))
        return jax.tree.unflatten(out_tree, flat)

    return run, list(closed.consts)


def _branch(pred: Array, true_fn: Callable[..., Any], false_fn: Callable[..., Any],
            *operands: Any) -> Any:
    """:func:`lockstep_cond` for branches that close over no vmapped value."""

    @custom_vmap
    def branch(pred: Array, operands: tuple[Any, ...]) -> Any:
        return jax.lax.cond(pred, true_fn, false_fn, *operands)

    @branch.def_vmap
    def rule(axis_size: int, in_batched: list[Any], pred: Array,
             operands: tuple[Any, ...]) -> tuple[Any, Any]:
        pred_batched, operands_batched = in_batched
        in_axes = jax.tree.map(lambda b: 0 if b else None, operands_batched)
        on_true = jax.vmap(true_fn, in_axes=in_axes, axis_size=axis_size)
        on_false = jax.vmap(false_fn, in_axes=in_axes, axis_size=axis_size)
        if pred_batched:
            def some(p: Array, new: Any, *o: Any) -> Any:  # members not due keep on_false's
                return jax.tree.map(lambda a, b: jax.vmap(jnp.where)(p, a, b), new,
                                    on_false(*o))

            def any_due(p: Array, *o: Any) -> Any:  # all due (lockstep): no select at all
                return _branch(jnp.all(p), lambda _, new, *o: new, some, p, on_true(*o), *o)

            out = _branch(jnp.any(pred), any_due, lambda _, *o: on_false(*o), pred, *operands)
        else:
            out = _branch(pred, on_true, on_false, *operands)
        return out, jax.tree.map(lambda _: True, out)

    return branch(pred, operands)
