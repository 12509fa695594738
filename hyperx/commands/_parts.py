"""The parts of a run over many seeds (``hyperx bandit``, ``hyperx games``): one CSV per item
(an agent, a matchup) and block of seeds, written as soon as the block finishes, with its
timings in a JSON beside it.

A part is written atomically, the JSON first, so a part's CSV on disk marks it done; a resumed
run skips those and checks each one it skips before any work (:meth:`Parts.read`): a cut or
damaged row, a missing or extra row, rows out of order, or a missing or damaged JSON exits with
one line naming the file and how to recompute it. The run's outputs are rebuilt from the parts,
so a resumed run ends byte-identical to an uninterrupted one.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hyperx._host import write_atomic, write_csv
from hyperx.commands._args import fail, positive_int
from hyperx.commands._rundir import add_run_options

if TYPE_CHECKING:
    import numpy as np

    from hyperx.commands._rundir import RunDirectory

Block = tuple[int, int, int]
"""(item index, first seed, one past the last seed)."""


def add_parts_options(parser: argparse.ArgumentParser) -> None:
    """The last options of a run in parts: ``--points``, ``--seeds-per-part`` and the run
    options (:func:`hyperx.commands._rundir.add_run_options`)."""
    parser.add_argument("--points", type=positive_int, default=50,
                        help="about this many log-spaced checkpoints t")
    parser.add_argument("--seeds-per-part", type=positive_int, default=500,
                        help="seeds per results file in OUT/parts (written as each finishes)")
    add_run_options(parser, quiet="no progress bar or table")


def log_checkpoints(args: argparse.Namespace) -> np.ndarray:
    """About ``--points`` log-spaced rounds t ending at ``--steps``
    (:func:`hyperx.loop.log_grid`); a one-line error naming ``--points`` otherwise."""
    from hyperx.loop import log_grid

    try:
        return log_grid(args.steps, args.points)
    except ValueError as err:
        fail(str(err).replace(f"num = {args.points}", f"--points {args.points}"))


class Parts:
    """The parts of one run in ``out/parts``: items x blocks of ``per_part`` seeds.

    Args:
      out: the run directory.
      item: what an item is, in the file names (``"agent"``, ``"matchup"``).
      num_items: the agents or matchups.
      seeds: the seeds of each item.
      per_part: the most seeds in one part.
      columns: the CSV header; every column but the last identifies a row, the last is a
        number.
      meta_keys: the keys every part's JSON must hold.
    """

    def __init__(self, out: Path, item: str, num_items: int, seeds: int, per_part: int, *,
                 columns: Sequence[str], meta_keys: Sequence[str]) -> None:
        self.out, self.item, self.columns = out, item, tuple(columns)
        self.meta_keys = tuple(meta_keys)
        self.blocks: list[Block] = [(i, start, min(start + per_part, seeds))
                                    for i in range(num_items)
                                    for start in range(0, seeds, per_part)]

    def path(self, block: Block) -> Path:
        """``out/parts/<item>NN_seedsFIRST-LAST.csv``."""
        i, start, stop = block
        return (self.out / "parts"
                / f"{self.item}{i:02d}_seeds{start:09d}-{stop - 1:09d}.csv")

    def todo(self, expected: Callable[[Block], Iterable[Sequence[Any]]] | None = None
             ) -> list[Block]:
        """The blocks without a part on disk (creates ``out/parts``); with ``expected``, every
        part on disk is checked first (:meth:`read` of ``expected(block)``), before any work."""
        (self.out / "parts").mkdir(exist_ok=True)
        todo = [b for b in self.blocks if not self.path(b).exists()]
        for block in self.blocks if expected is not None else ():
            if block not in todo:
                self.read(block, expected(block))
        return todo

    def of(self, item: int) -> list[Block]:
        """The blocks of one item, in seed order."""
        return [b for b in self.blocks if b[0] == item]

    def write(self, block: Block, rows: Iterable[Sequence[Any]], meta: dict[str, Any]) -> None:
        """Write one part: its JSON, then its CSV (header and ``rows``)."""
        path = self.path(block)
        write_atomic(path.with_suffix(".json"), json.dumps(meta) + "\n")
        write_csv(path, self.columns, rows)

    def read(self, block: Block, expected: Iterable[Sequence[Any]]
             ) -> tuple[list[list[str]], list[float], dict[str, Any]]:
        """The rows, their numbers (the last column) and the JSON of one part, checked:
        row ``k`` must be ``expected[k]`` followed by a finite or non-finite float, with as many
        rows as ``expected`` holds. Exits with one line naming the file otherwise."""
        path = self.path(block)
        fix = "delete it and rerun the same command with --resume to recompute it"
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as err:
            fail(f"{path}: cannot be read ({type(err).__name__}); {fix}")
        rows = list(csv.reader(io.StringIO(text)))
        if text and not text.endswith("\n"):
            fail(f"{path}: line {len(rows)} is cut (the file ends inside it); {fix}")
        if not rows or tuple(rows[0]) != self.columns:
            fail(f"{path}: expected the header {','.join(self.columns)}, got "
                 f"{','.join(rows[0]) if rows else 'an empty file'}; {fix}")
        rows, values = rows[1:], []
        expected = [tuple(str(v) for v in keys) for keys in expected]
        for number, (row, keys) in enumerate(zip(rows, expected, strict=False), start=2):
            try:
                ok = len(row) == len(self.columns) and tuple(row[:-1]) == keys
                values.append(float(row[-1]) if ok else 0.0)
            except ValueError:
                ok = False
            if not ok:
                fail(f"{path}: line {number} is not the row {','.join(keys)},<value> (cut or "
                     f"damaged), got {','.join(row)!r}; {fix}")
        if len(rows) != len(expected):
            fail(f"{path}: expected {len(expected)} rows, got {len(rows)}; {fix}")
        meta_path = path.with_suffix(".json")
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError) as err:
            fail(f"{meta_path}: the timings of {path.name} are missing or damaged "
                 f"({type(err).__name__}); delete {path.name} and rerun the same command with "
                 "--resume to recompute it")
        if not isinstance(meta, dict) or any(key not in meta for key in self.meta_keys):
            fail(f"{meta_path}: expected a JSON object with {', '.join(self.meta_keys)}; "
                 f"delete {path.name} and rerun the same command with --resume to recompute it")
        return rows, values, meta

    def run(self, run: RunDirectory, todo: Sequence[Block], play: Callable[[Block], Any], *,
            progress: str | None, on_part: Callable[[Block, Any], None] | None = None) -> None:
        """Play the blocks ``todo`` one a chunk of :func:`hyperx.loop.run_chunks`, inside
        ``run.guard`` (Ctrl-C: :meth:`stopped`): ``play(block)`` then, with Ctrl-C held,
        ``on_part(block, what play returned)``."""
        from hyperx.loop import run_chunks

        def on_chunk(chunk: Any) -> None:
            on_part(todo[chunk.done - 1], chunk.metrics["part"])

        with run.guard(stopped=lambda stop: self.stopped()):
            run_chunks(lambda k: (k + 1, {"part": play(todo[k])}), 0, position=lambda k: k,
                       total=len(todo), on_chunk=None if on_part is None else on_chunk,
                       progress=progress, unit="part")

    def join(self, name: str, copy: Callable[[Any], None]) -> None:
        """Write ``out/NAME`` through a temporary file: the header, then the rows that
        ``copy(csv_writer)`` copies from the parts; a damaged part exits leaving no temporary
        file behind."""
        tmp = self.out / f".{name}.tmp"
        try:
            with open(tmp, "w", newline="") as f:
                writer = csv.writer(f)
                writer.writerow(self.columns)
                copy(writer)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        tmp.replace(self.out / name)

    def stopped(self) -> str:
        """Where an interrupted run stands: ``N of M parts are in OUT/parts; ...``."""
        done = sum(self.path(b).exists() for b in self.blocks)
        return (f"{done} of {len(self.blocks)} parts are in {self.out}/parts; rerun the same "
                "command with --resume to finish")
