"""No-regret learning in unknown repeated games (GP-MW and its bandit baselines).

Games are payoff tensors (:mod:`hyperx.games.normal_form`); players are pure-function learners
(:mod:`hyperx.games.learners`: Hedge, Exp3.P, Exp3-IX, GP-MW, GP-MW on Ensemble++, uniform);
:func:`play` runs a repeated game as one ``lax.scan`` and :func:`play_seeds` vmaps it over seeds.
The payoff models of GP-MW are the linear cores of :mod:`hyperx.linear` on kernel features
(:mod:`hyperx.games.kernels`). Congestion games on road networks (the authors' Sioux Falls
routing experiment) are in :mod:`hyperx.games.routing`, their population learners and loop in
:mod:`hyperx.games.routing_play`.
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
from hyperx.games.routing import (
    RoutingGame,
    best_response_equilibrium,
    routing_game,
    sioux_falls,
)
from hyperx.games.routing_play import ROUTING_LEARNERS, make_population, play_routing, setting

__all__ = ["LEARNERS", "RBF", "ROUTING_LEARNERS", "Feedback", "GameLearner", "PlayResult",
           "PlayerSpec", "RoutingGame", "Rounds", "best_response_equilibrium", "cce_gap",
           "eigen_features", "ensemble_mw", "exp3_ix", "exp3p", "fourier_features",
           "gp_mw", "hedge", "make_learner", "make_play_seeds", "make_population", "nash_conv",
           "payoff", "payoff_vector", "play", "play_routing", "play_seeds", "random_gp_game",
           "rock_paper_scissors", "routing_game", "setting", "sioux_falls", "uniform",
           "zero_sum"]
