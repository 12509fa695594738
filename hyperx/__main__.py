"""``python -m hyperx``: the ``hyperx`` console script (:func:`hyperx.commands.console`)."""

from hyperx.commands import console

console()
