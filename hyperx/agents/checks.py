"""Host-side checks of what a caller hands the agent (:mod:`hyperx.agents.core`).

They look at concrete values only (a call from the host, outside ``jit``/``scan``), so a
compiled training loop pays nothing; there an out-of-range state id is clamped by the
embedding's gather and an out-of-range action indexes nothing sensible, so check the inputs of
a compiled loop at its source (the environment) or run it under :func:`hyperx.checked` with
``checked=True``.
"""

from __future__ import annotations

from typing import Any

from hyperx._validation import check_finite, check_index


def check_observation(obs: Any, num_states: int | None, *, checked: bool = False) -> None:
    """Integer state ids must lie in [0, num_states); float observations must be finite."""
    if num_states is not None:
        check_index("obs", obs, num_states, checked=checked)
    else:
        check_finite("obs", obs, checked=checked)


def check_transition(transition: Any, num_actions: int, num_states: int | None, *,
                     checked: bool = False) -> None:
    """The action must be in [0, num_actions), the reward finite, the observation valid."""
    check_observation(transition.obs, num_states, checked=checked)
    check_index("transition.action", transition.action, num_actions, checked=checked)
    check_finite("transition.reward", transition.reward, checked=checked)
