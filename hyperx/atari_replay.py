"""Deprecated: the frame-once Atari replay is the ``"frames"`` layout of the one replay core,
:func:`hyperx.replay.make_replay_buffer` (``layout="frames", num_streams=E``). The old names
still import for one release and warn with their new home."""

from __future__ import annotations

import warnings

from hyperx._deprecation import moved
from hyperx.replay import ReplayBuffer, make_replay_buffer

_getattr = moved("hyperx.atari_replay", {
    "replay_bytes": "hyperx.replay", "STACK": "hyperx.replay", "PADS": "hyperx.replay",
    "FrameReplayState": "hyperx.replay:ReplayState", "FrameReplay": "hyperx.replay:ReplayBuffer",
})


def __getattr__(name: str):
    if name == "make_frame_replay":
        return _make_frame_replay
    return _getattr(name)


def _make_frame_replay(num_streams: int, n_step: int = 1, gamma: float = 0.99, *,
                       pad: str = "repeat") -> ReplayBuffer:
    """``make_replay_buffer(n_step, gamma, num_streams=..., layout="frames", pad=...)``."""
    warnings.warn("hyperx.atari_replay.make_frame_replay is hyperx.replay.make_replay_buffer("
                  "..., num_streams=E, layout='frames'); make_frame_replay goes in the next "
                  "release", DeprecationWarning, stacklevel=2)
    return make_replay_buffer(n_step, gamma, num_streams=num_streams, layout="frames", pad=pad)
