"""Run the GP-MW authors' own ``RunGame`` (sessap/noregretgames) on given games; NumPy only.

Called by ``benchmarks/games.py --authors-dir`` with the Python of an environment the authors'
2019 code runs in (it assigns a one-element array to an array element, an error since NumPy
1.25): ``--authors-python`` of a venv with ``numpy==1.24.4``. Their file's top level runs their
whole experiment, so only its ``GameData`` and ``RunGame`` definitions are executed, with their
``aux_functions`` (the players) imported from their folder unchanged.

    python benchmarks/games_authors.py --authors-dir DIR --games games.npy --out out.json \
        --pairs MWU:random EXP3:random GPMW:random GPMW:EXP3
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from pathlib import Path

import numpy as np


def load(directory: Path) -> dict:
    folder = directory / "Repeated_MatrixGames"
    sys.path.insert(0, str(folder))
    tree = ast.parse((folder / "Repeated_matrix_games.py").read_text())
    keep = [node for node in tree.body if isinstance(node, ast.ClassDef | ast.FunctionDef)
            and node.name in ("GameData", "RunGame")]
    namespace: dict = {}
    exec("import numpy as np\nfrom aux_functions import Assign_payoffs, Player_MWU, "
         "Player_EXP3, Player_random, Player_GPMW", namespace)
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(folder), "exec"), namespace)
    return namespace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--authors-dir", type=Path, required=True)
    parser.add_argument("--games", type=Path, required=True, help=".npy of shape (G, 2, K, K)")
    parser.add_argument("--pairs", nargs="+", required=True)
    parser.add_argument("--horizon", type=int, default=200)
    parser.add_argument("--sigma", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    run_game = load(args.authors_dir)["RunGame"]
    games = np.load(args.games).astype(np.float64)
    k = games.shape[-1]
    out = {"numpy": np.__version__}
    for pair in args.pairs:
        types = pair.split(":")
        np.random.seed(args.seed)  # noqa: NPY002 (their code draws from the global generator)
        curves, start = [], time.perf_counter()
        for game in games:
            data, _ = run_game(2, k, args.horizon, args.sigma, [game[0], game[1]], types,
                               1.0, k / 5)
            curves.append([[float(data.Regrets[t][i]) for i in range(2)]
                           for t in range(args.horizon)])
        out[pair] = {"seconds": time.perf_counter() - start, "curves": curves}
        print(pair, f"{out[pair]['seconds']:.0f} s", flush=True)
    args.out.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
