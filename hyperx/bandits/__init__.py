"""Contextual-bandit learners behind one interface (:class:`hyperx.bandits.base.Learner`).

Linear and GLM learners are re-exported here; the neural learners live in
:mod:`hyperx.bandits.neural`, and :mod:`hyperx.bandits.registry` builds any learner by name.
"""

from hyperx.bandits.base import BanditSpec, Learner, argmax_random_tiebreak, delayed
from hyperx.bandits.baselines import epsilon_greedy, uniform_random
from hyperx.bandits.glm import logistic_ts
from hyperx.bandits.linear import ensemble_pp, exact_ts, linucb

__all__ = ["BanditSpec", "Learner", "argmax_random_tiebreak", "delayed", "ensemble_pp",
           "epsilon_greedy", "exact_ts", "linucb", "logistic_ts", "uniform_random"]
