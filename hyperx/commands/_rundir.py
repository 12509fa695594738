"""Output directories of the ``hyperx`` commands: checked before any work, resumable.

A run's directory holds ``run.json`` (the command and its settings, and ``complete`` once the
run has finished) beside its outputs. :meth:`RunDirectory.open` claims it before anything is
computed:

- ``--out`` must be a directory path that can be created and written;
- an empty or new directory starts a fresh run; so does the directory of an unfinished earlier
  run with the same settings (its outputs are replaced) unless ``--resume`` continues it;
- the same command on its finished run does nothing and says the run is complete, with or
  without ``--resume`` (``--overwrite`` runs it again);
- a directory holding a different run, or files that are not a hyperx run, is refused unless
  ``--overwrite`` (which removes the files this command writes, and only those) is given;
  ``--resume`` into a different run names the first differing option and both values.

Outputs are written with :func:`hyperx._host.write_atomic` (a temporary file renamed into
place), so an interrupted write never leaves a truncated file under its final name.

:class:`RunDirectory` is the one lifecycle every command that trains follows, from the check of
``--out`` to the finished ``run.json``: ``--dry-run``, the finished-run message, ``--resume``
of a run that saved no state, Ctrl-C (exit 130 with one line) and a refused run (exit 2, a
fresh run's files removed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hyperx._host import environment, first_difference, write_atomic
from hyperx._validation import MemoryEstimate
from hyperx.commands._args import check_out_path, check_out_usable, fail, interrupted
from hyperx.commands._dryrun import WorkEstimate, add_dry_run_option, report
from hyperx.commands._tracking import Tracker, add_tracking_option, check_tracking

MANIFEST = "run.json"


def interval95(values) -> dict[str, Any]:
    """Mean, standard deviation and normal 95% interval (mean +- 1.96 sd / sqrt(n)) of the
    per-seed ``values`` that a run's summary.json reports (``sd``, ``ci95``: None for n < 2)."""
    values = np.asarray(values, np.float64)
    mean = float(np.mean(values))
    if values.size < 2:
        return {"mean": mean, "sd": None, "ci95": None}
    sd = float(np.std(values, ddof=1))
    half = 1.96 * sd / math.sqrt(values.size)
    return {"mean": mean, "sd": sd, "ci95": [mean - half, mean + half]}


def format_interval(interval: dict[str, Any], digits: int) -> str:
    """``MEAN [LOW, HIGH]`` of an :func:`interval95` with ``digits`` decimals (``MEAN`` alone
    when it has no interval)."""
    ci = interval["ci95"]
    return (f"{interval['mean']:.{digits}f}"
            + (f" [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]" if ci else ""))


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, +-inf) replaced by ``None``, so that
    ``json.dumps(..., allow_nan=False)`` writes standard JSON (``-Infinity`` is not JSON)."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, float | np.floating) and not math.isfinite(value):
        return None
    return value


def _option(difference: str) -> str:
    key, _, rest = difference.partition(":")
    return f"--{key.replace('_', '-')}{':' if rest else ''}{rest}"


def read_manifest(out: Path) -> dict[str, Any] | None:
    """The run description in ``out``, or ``None`` when there is none."""
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("command"), str):
        return None  # damaged: not a run description (e.g. [] or without its command)
    return manifest


def write_manifest(out: Path, command: str, settings: dict[str, Any], *,
                   complete: bool = False) -> None:
    """Record ``command`` and ``settings`` (and whether the run finished) in ``out``, with
    the :func:`environment` of the process that writes it."""
    write_atomic(out / MANIFEST, json.dumps(
        {"command": command, "settings": settings, "complete": complete,
         "environment": environment()}, indent=2) + "\n")


def write_summary_json(out: Path, summary: dict[str, Any], name: str = "summary.json") -> None:
    """Write ``out/summary.json`` (or ``out/NAME``) atomically, with the :func:`environment`
    that produced it under ``"environment"``: standard JSON, every non-finite number written as
    ``null`` (:func:`json_safe`; ``NaN`` and ``Infinity`` are not JSON)."""
    text = json.dumps(json_safe({**summary, "environment": environment()}), indent=2,
                      allow_nan=False)
    write_atomic(Path(out) / name, text + "\n")


def remove_outputs(out: Path, names: Iterable[str]) -> None:
    """Delete the files and folders ``names`` a command writes in ``out``, and its run.json."""
    for name in [*names, MANIFEST]:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def check_out_rules(out: str, command: str, settings: dict[str, Any], *, resume: bool,
                    overwrite: bool) -> dict[str, Any] | None:
    """The run-directory rules (module docstring) without touching ``out`` (what
    ``--dry-run`` checks): returns the manifest a ``--resume`` continues, or that of the same
    run already complete (with or without ``--resume``; ``--overwrite`` runs it again), else
    ``None``; exits with a one-line error when the directory cannot be used."""
    check_out_usable(out)
    path = Path(out)
    manifest = read_manifest(path) if path.is_dir() else None
    same = (manifest is not None and manifest.get("command") == command
            and manifest.get("settings") == settings)
    if resume:
        if manifest is None:
            why = "damaged" if (path / MANIFEST).exists() else "missing"
            fail(f"--resume: {out!r} holds no hyperx {command} run ({MANIFEST} {why})")
        if manifest.get("command") != command:
            fail(f"--resume: {out!r} holds a hyperx {manifest['command']} run, not a "
                 f"{command} run")
        if not same:
            fail(f"--resume: {out!r} holds a different run, "
                 f"{_option(first_difference(manifest.get('settings') or {}, settings) or '')}; "
                 "rerun with the saved options or choose another --out")
        return manifest
    if same and manifest.get("complete") and not overwrite:
        return manifest  # the finished run itself: the command says so and does nothing
    if path.is_dir() and any(path.iterdir()) and not same and not overwrite:
        if manifest is not None:
            diff = first_difference(manifest.get("settings") or {}, settings)
            why = (f"a hyperx {manifest.get('command')} run"
                   if manifest.get("command") != command or not diff
                   else f"a different run, {_option(diff)}")
            fail(f"--out: {out!r} holds {why}; pass --overwrite to replace it or choose "
                 "another --out")
        fail(f"--out: {out!r} is not empty and holds no hyperx run; pass --overwrite to write "
             "there anyway or choose another --out")
    return None


def saved_run(args: argparse.Namespace, command: str) -> argparse.Namespace:
    """For ``--eval-only``: the options of the ``command`` run in ``args.out`` (its run.json's
    settings over ``args``); exits with a one-line error when ``--out`` holds no such run or the
    run saved no agent (made without ``--checkpoint``)."""
    out = Path(args.out)
    manifest = read_manifest(out) if out.is_dir() else None
    if manifest is None or manifest.get("command") != command:
        fail(f"--eval-only: {args.out!r} holds no hyperx {command} run (its run.json is missing "
             "or names another command); pass the --out of a run made with --checkpoint")
    run = argparse.Namespace(**{**vars(args), **(manifest.get("settings") or {})})
    if not run.checkpoint:
        fail(f"--eval-only: the run in {args.out!r} was made without --checkpoint, so no agent "
             "was saved; train with --checkpoint to evaluate it later")
    return run


def read_summary(path: Path) -> dict | None:
    """A run's ``summary.json`` as a dict, ``None`` when there is none; ``ValueError`` naming
    the file when it is not a JSON object."""
    if not path.exists():
        return None
    try:
        meta = json.loads(path.read_text())
    except ValueError:
        raise ValueError(f"{path}: not JSON") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return meta


def add_run_options(parser: argparse.ArgumentParser, *, quiet: str = "no progress bar") -> None:
    """The options of every command that trains into ``--out``: ``--out``, ``--resume`` /
    ``--overwrite`` (mutually exclusive), ``--quiet``, ``--track`` and ``--dry-run``."""
    parser.add_argument("--out", required=True, help="output directory")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--resume", action="store_true",
                       help="continue the run in --out (same options), skipping finished work")
    group.add_argument("--overwrite", action="store_true",
                       help="replace what another run wrote to --out (other files are kept)")
    parser.add_argument("--quiet", action="store_true", help=quiet)
    add_tracking_option(parser)
    add_dry_run_option(parser)


class RunDirectory:
    """The lifecycle of one run of a command in its ``--out`` (module docstring)::

        run = RunDirectory(args, "deepsea", settings, OUTPUTS, extent="all 400 episodes",
                           checkpointed=args.checkpoint)
        if args.dry_run:
            return run.dry_run(memory=memory, work=[...])
        if not run.open():              # the same run, finished: says so, nothing to do
            return 0
        with run.guard(stopped=lambda stop: "where things stand"):
            result = train(...)
        ...                             # write the outputs
        run.finish()                    # run.json: complete

    Args:
      args: the parsed options (``out``, ``resume``, ``overwrite``, ``track``, ``dry_run``).
      command: the subcommand, recorded in run.json.
      settings: the options that define the run (a resumed run must match them).
      outputs: every file and folder the command writes in ``--out``.
      extent: what a finished run holds, for the finished-run message ("all 400 episodes").
      checkpointed: whether the run saves its state (``None``: a run of parts, whose finished
        parts are its state).
    """

    def __init__(self, args: argparse.Namespace, command: str, settings: dict[str, Any],
                 outputs: Sequence[str], *, extent: str, checkpointed: bool | None = None
                 ) -> None:
        check_tracking(args.track)
        self.args, self.command, self.settings = args, command, settings
        self.outputs, self.extent, self.checkpointed = tuple(outputs), extent, checkpointed
        self.out = Path(args.out)
        self.manifest: dict[str, Any] | None = None

    def tracker(self) -> Tracker:
        """The run's metric logger: Weights & Biases with ``--track``, else one that drops
        everything."""
        return Tracker(self.out, self.command, self.settings, track=self.args.track)

    @property
    def resumed(self) -> bool:
        """Whether this run continues one found in ``--out``."""
        return self.manifest is not None

    def planned_outputs(self) -> list[str]:
        """The outputs this run writes: ``wandb`` only with ``--track``, ``checkpoints`` only
        for a checkpointed run."""
        return [o for o in self.outputs if (o != "wandb" or self.args.track)
                and (o != "checkpoints" or self.checkpointed is not False)]

    def dry_run(self, *, memory: Sequence[MemoryEstimate], work: Sequence[WorkEstimate]) -> int:
        """``--dry-run``: the folder rules without touching ``--out``, then the plan."""
        check_out_rules(self.args.out, self.command, self.settings, resume=self.args.resume,
                        overwrite=self.args.overwrite)
        return report(self.command, out=self.args.out, resume=self.args.resume, memory=memory,
                      outputs=self.planned_outputs(), work=work)

    def open(self, *, rebuild: bool = False) -> bool:
        """Claim ``--out`` before any work (module docstring): a fresh run removes this
        command's outputs there and writes its run.json. Returns ``False`` after saying so when
        ``--out`` holds this run finished (``rebuild``: a run of parts rebuilds its outputs from
        them instead, and ``True`` is returned); exits with a one-line error when the folder
        cannot be used (:func:`check_out_rules`) or ``--resume`` finds a run that saved no
        state."""
        self.manifest = check_out_rules(self.args.out, self.command, self.settings,
                                        resume=self.args.resume, overwrite=self.args.overwrite)
        check_out_path(self.args.out)
        if self.manifest is None:
            remove_outputs(self.out, self.outputs)
            write_manifest(self.out, self.command, self.settings)
        if self.complete and not rebuild:
            self.say_complete("nothing to do (--overwrite runs it again)")
            return False
        if self.resumed and not self.complete and self.checkpointed is False:
            fail(f"--resume: {self.args.out!r} was run without --checkpoint, so there is no "
                 "state to resume from; rerun without --resume")
        if self.resumed and not self.complete and self.checkpointed and not any(
                p.is_dir() and p.name.isdigit() for p in (self.out / "checkpoints").glob("*")):
            fail(f"--resume: {self.out / 'checkpoints'} holds no checkpoint (the run stopped "
                 "before its first save, or the folder was removed), so there is no state to "
                 "resume from; rerun without --resume to start again")
        return True

    @property
    def complete(self) -> bool:
        """Whether ``--out`` held this run, finished, when it was opened."""
        return bool(self.manifest is not None and self.manifest.get("complete"))

    def say_complete(self, what_now: str) -> None:
        """``run is complete: OUT holds EXTENT of this run; WHAT_NOW``."""
        print(f"run is complete: {self.out} holds {self.extent} of this run; {what_now}")

    @contextlib.contextmanager
    def guard(self, *, stopped: Callable[[KeyboardInterrupt], str]) -> Iterator[None]:
        """Around the work: Ctrl-C exits with 130 and the one line ``stopped(interrupt)`` (where
        things stand, how to resume); a ``ValueError`` exits with 2 and its message, after
        removing the files of a fresh run (a resumed run keeps its own)."""
        try:
            yield
        except KeyboardInterrupt as stop:
            interrupted(stopped(stop))
        except ValueError as err:
            if not self.resumed:
                remove_outputs(self.out, self.outputs)
            fail(str(err))

    def stopped(self, stop: KeyboardInterrupt, *, unit: str, kept: str, per: str = "") -> str:
        """The Ctrl-C line of a trainer that checkpoints through :func:`hyperx.loop.run_chunks`:
        ``after UNIT D of TPER; KEPT; the checkpoint of UNIT S is in OUT/checkpoints; rerun the
        same command with --resume to continue`` (or why there is no checkpoint)."""
        step = getattr(stop, "checkpoint_step", None)
        if step is not None:
            where = (f"the checkpoint of {unit} {step} is in {self.out / 'checkpoints'}; rerun "
                     "the same command with --resume to continue")
        elif self.checkpointed:
            where = "no checkpoint yet; rerun the same command without --resume to start again"
        else:
            where = "no checkpoint (run with --checkpoint to make a run resumable)"
        total = getattr(stop, "total", None)
        when = (f"after {unit} {stop.done} of {total}{per}" if total is not None
                else "before the first chunk")
        return f"{when}; {kept}; {where}"

    def finish(self) -> None:
        """Record the run as complete in its run.json."""
        write_manifest(self.out, self.command, self.settings, complete=True)
