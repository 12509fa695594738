"""No-regret learning in unknown repeated games (GP-MW and its bandit baselines).

Games are payoff tensors (:mod:`hyperx.games.normal_form`); players are pure-function learners
(:mod:`hyperx.games.learners`: Hedge, Exp3.P, Exp3-IX, GP-MW, GP-MW on Ensemble++, uniform);
:func:`play` runs a repeated game as one ``lax.scan`` and :func:`play_seeds` vmaps it over seeds.
The payoff models of GP-MW are the linear cores of :mod:`hyperx.linear` on kernel features
(:mod:`hyperx.games.kernels`).
"""

from hyperx.games.kernels import RBF, eigen_features, fourier_features
from hyperx.games.learners import (
    LEARNERS,
    Feedback,
    GameLearner,
    PlayerSpec,
    ensemble_mw,
    exp3_ix,
    exp3p,
    gp_mw,
    hedge,
    make_learner,
    uniform,
)
from hyperx.games.normal_form import (
    cce_gap,
    nash_conv,
    payoff,
    payoff_vector,
    random_gp_game,
    rock_paper_scissors,
    zero_sum,
)
from hyperx.games.play import PlayResult, Rounds, make_play_seeds, play, play_seeds

__all__ = ["LEARNERS", "RBF", "Feedback", "GameLearner", "PlayResult", "PlayerSpec", "Rounds",
           "cce_gap", "eigen_features", "ensemble_mw", "exp3_ix", "exp3p", "fourier_features",
           "gp_mw", "hedge", "make_learner", "make_play_seeds", "nash_conv", "payoff",
           "payoff_vector", "play", "play_seeds", "random_gp_game", "rock_paper_scissors",
           "uniform", "zero_sum"]
