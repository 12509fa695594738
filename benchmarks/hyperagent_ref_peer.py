"""The authors' HyperAgent code, run under its own environment (instrumentation only).

This file runs under the authors' venv's Python (built by :mod:`benchmarks.hyperagent_ref_env`),
never ours, and imports nothing of hyperx (only the numpy-only weight map of
``hyperagent_ref_env.py`` beside it). Four commands:

``qvalues``: builds their ``HyperAgentNet`` exactly as ``run_atari.py`` does for
``run_HyperAgent.sh``'s arguments (3 actions by default), loads a state written by
:func:`hyperagent_ref_env.save_state`, and writes ``Q(s, a, z)`` (B, K, A) for the frames
(B, 4, 84, 84) and indices (K, M) of an input ``.npz``.

``update``: one update of their ``HyperAgentPolicy`` on a given batch and indices
(:func:`update_command`): the double-Q bootstrap values, the loss and its gradients.

``frames``: their training env (``make_atari_env``: ``wrap_atari`` with episodic life, clipped
rewards and ``--atari-100k 1``'s cap) played with given actions from a reset with exactly one
no-op (:func:`frames_command`): every observation, reward and done, to compare with our
front end on the same actions.

``train``: executes ``hyperagent/scripts/hyperagent/run_atari.py`` from the checkout with
``runpy`` as ``__main__``, with ``run_HyperAgent.sh``'s arguments, and measures. What it
changes, all at run time, none of it in their code:

1. :func:`legacy_atari`: the ``NoFrameskip-v4`` ids are re-registered with gym 0.23.1 to an
   old-API subclass of ale-py 0.8.1's ``AtariEnv`` (``reset -> obs``, ``step -> (obs, r,
   terminated or truncated, info)``), with gym 0.19's ``TimeLimit`` of ``frameskip * 100000``
   steps and no ``OrderEnforcing`` (the reasons are in ``hyperagent_ref_env``'s docstring).
2. ``hyperagent.policy.HyperAgentPolicy`` is wrapped so that, when ``run_atari.py`` builds
   the policy (after it built ``HyperAgentNet`` and re-drew the torso with
   ``--base-init xavier_normal``, and before the policy copies the model into its target
   network), the model's weights are replaced by the given state (``load_state_dict``,
   strict). Every random draw of their set-up still happens, so their RNG streams are those
   of a plain run with the same ``--seed``.
3. ``hyperagent.env.utils.make_atari_env`` (the training env's factory) is wrapped: the
   returned env records each training step's action and (clipped) reward; after every
   ``--every`` steps and their updates (when the next step is asked for) it measures (below)
   and writes the progress JSON; once ``--steps`` steps and their updates are done it stops
   the run (an exception caught here), so the 100 x 20,000-step schedule is cut short.
4. ``HyperLinear.process_noise`` gets a copy of its index tensor. It normalises the index in
   place (``noise /= norm``) after ``noise.to(self.device)``; the indices are drawn on the
   CPU, so on the authors' GPU (``--device cuda``) ``.to`` copies and the in-place division
   never touches the caller's tensor, while on a CPU ``.to`` returns the tensor itself: the
   index then changes under the graph that saved it (``learn`` calls the model and then
   ``Q.regularization`` on the same ``noise_update``) and ``loss.backward()`` fails ("one of
   the variables needed for gradient computation has been modified by an inplace
   operation"). The copy is what their GPU runs did; the values are the same.
5. ``--logdir`` points their logs and checkpoints into the output folder.

The measurements, at step 0 and every ``--every`` training steps: the spread over the 64
probe indices of ``Q(s, a, z)`` (the standard deviation over indices, per probe frame and
action, under ``torch.no_grad``: nothing random is drawn), the share of UP among the last
``--every`` training actions, the step of the first non-zero training reward, the finished
training episodes' (clipped) returns and the wall time.

Usage: ``python hyperagent_ref_peer.py qvalues --checkout DIR --state S.npz --inputs I.npz
--out O.npz`` or ``python hyperagent_ref_peer.py train --checkout DIR --state S.npz --probe
P.npz --out progress.json --seed N --steps T --every N [--game Freeway]`` or ``python
hyperagent_ref_peer.py update --checkout DIR --state S.npz --target-state T.npz --inputs
B.npz --out U.npz`` or ``python hyperagent_ref_peer.py frames --checkout DIR --inputs A.npz
--out F.npz [--game Freeway]``.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import time

import numpy as np

RUN_ATARI = os.path.join("hyperagent", "scripts", "hyperagent", "run_atari.py")


class StopRun(Exception):
    """Raised from the training env after the requested number of steps."""


def legacy_atari() -> None:
    """Re-register every ``*NoFrameskip-v4`` id of gym's registry to :class:`LegacyAtariEnv`
    (old step/reset API), with gym 0.19's ``TimeLimit`` and no ``OrderEnforcing``."""
    import ale_py.env.gym as ale_gym
    import gym
    from gym.envs.registration import registry

    class LegacyAtariEnv(ale_gym.AtariEnv):
        """ale-py 0.8.1's AtariEnv with gym 0.19's API: ``reset -> obs`` and 4-tuple steps
        (``done = terminated or truncated``; the ALE's 108,000-frame cap is its truncation)."""

        def reset(self, **kwargs):
            obs, _ = super().reset(**kwargs)
            return obs

        def step(self, action):
            obs, reward, terminated, truncated, info = super().step(action)
            return obs, reward, terminated or truncated, info

    frameskip = {"space_invaders": 3}
    specs = registry.env_specs if hasattr(registry, "env_specs") else registry
    for env_id, spec in list(specs.items()):
        if not env_id.endswith("NoFrameskip-v4") or "/" in env_id:
            continue
        if spec.entry_point != "ale_py.env.gym:AtariEnv":
            continue
        game = spec.kwargs["game"]
        spec.entry_point = LegacyAtariEnv
        spec.order_enforce = False
        spec.max_episode_steps = frameskip.get(game, 4) * 100_000
    gym.logger.set_level(gym.logger.ERROR)


def _import_checkout(checkout: str) -> None:
    sys.path.insert(0, os.path.abspath(checkout))


def _copy_index_before_normalising() -> None:
    """Change 4 above: ``HyperLinear.process_noise`` normalises a copy of its index."""
    import hyperagent.network.hyperagent as hyper_layers

    process_noise = hyper_layers.HyperLinear.process_noise
    hyper_layers.HyperLinear.process_noise = lambda self, noise: process_noise(self,
                                                                               noise.clone())


def build_model(num_actions: int, args: dict | None = None):
    """``HyperAgentNet`` as ``run_atari.py`` builds it with ``run_HyperAgent.sh``'s arguments
    (the parser's defaults otherwise; ``args`` overrides), on the CPU."""
    from hyperagent.network import HyperAgentNet

    a = dict(noise_dim=4, noise_norm=1, noise_scale=0, prior_std=0.1, prior_scale=0.1,
             posterior_scale=0.1, hyper_init="xavier_normal", prior_init="sDB",
             bias_init="xavier-uniform", hidden_size=256, hidden_layer=1, base_prior=1,
             model_type="conv", normalize="MinMax", frames_stack=4)
    a.update(args or {})
    last_layer_params = {k: a[k] for k in ("noise_dim", "noise_norm", "noise_scale", "prior_std",
                                           "prior_scale", "posterior_scale", "hyper_init",
                                           "prior_init", "bias_init")}
    last_layer_params["device"] = "cpu"
    return HyperAgentNet(state_shape=(a["frames_stack"], 84, 84), action_shape=num_actions,
                         hidden_sizes=[a["hidden_size"]] * a["hidden_layer"], device="cpu",
                         base_prior=a["base_prior"], model_type=a["model_type"],
                         normalize=a["normalize"], last_layer_params=last_layer_params)


def load_state(model, path: str) -> None:
    """Replace ``model``'s weights with the arrays of ``path`` (strict: every key, every
    shape)."""
    import torch

    with np.load(path) as f:
        state = {k: torch.from_numpy(np.array(f[k])) for k in f.files}
    model.load_state_dict(state, strict=True)


def q_values(model, frames: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """``Q(s_b, a, z_k)`` (B, K, A) for frames (B, 4, 84, 84) and indices (K, M): one index
    set per frame (their per-sample path), a copy of the indices (their forward normalises
    its noise in place)."""
    import torch

    if frames.ndim != 4 or indices.ndim != 2:
        raise ValueError(f"expected frames (B, 4, 84, 84) and indices (K, M), got "
                         f"{frames.shape} and {indices.shape}")
    noise = torch.from_numpy(np.ascontiguousarray(
        np.broadcast_to(indices.astype(np.float32), (frames.shape[0], *indices.shape))))
    with torch.no_grad():
        q, _ = model(frames, noise={"Q": noise.clone()})
    return q.numpy()


def qvalues_command(args: argparse.Namespace) -> None:
    _import_checkout(args.checkout)
    model = build_model(args.actions)
    load_state(model, args.state)
    with np.load(args.inputs) as f:
        q = q_values(model, f["frames"], f["indices"])
    np.savez(args.out, q=q)


#: ``run_atari.py``'s ``policy_params`` for ``run_HyperAgent.sh``'s arguments (the parser's
#: defaults otherwise), less the model, optimiser, seed and action space.
POLICY_ARGS = dict(
    discount_factor=0.99, estimation_step=5, target_update_freq=5, reward_normalization=False,
    is_double=1, noise_per_sample=20, target_noise_per_sample=1, max_target=0.0,
    action_sample_num=1, action_select_scheme="Greedy", quantile_max=0.8, noise_std=1.0,
    noise_dim=4, grad_coef=0.01, hyper_reg_coef=0.01, target_noise_coef=0.01,
    target_noise_type="sp", clip_grad_norm=10.0, dependent_target_noise=0,
    state_dependent_noise_action=0, state_dependent_noise_target=1)


def update_command(args: argparse.Namespace) -> None:
    """One ``HyperAgentPolicy`` update on given inputs: the double-Q bootstrap values of
    ``_target_q`` and one ``learn``, as ``policy.update`` runs them after sampling.

    The model is built and loaded as for ``qvalues``; the policy as ``run_atari.py`` builds
    it (:data:`POLICY_ARGS`, Adam on the non-prior parameters with lr 1e-4 and eps 1.5e-4),
    then its target network gets ``--target-state``. Inputs (``--inputs``): ``obs`` and
    ``obs_next`` (B, 4, 84, 84) uint8, ``act`` (B,), ``returns`` (B,) (the n-step targets
    ``learn`` fits), ``target_noise`` (B, 1, M) (the per-transition perturbation xi),
    ``noise_update`` (B, K, M) and ``noise_target`` (B, 1, M) (raw Gaussian indices, which
    ``update`` draws), ``sample_num`` (|D|). Writes ``target_q`` (B,), ``loss``, ``reg`` (their
    ``Q.regularization`` of the update indices), ``grad_norm`` (before clipping) and
    ``grad.NAME`` for each trainable parameter (before clipping) to ``--out`` (.npz).

    Run-time changes: ``process_noise`` gets a copy of its index (as for ``train``), the
    policy's ``updating`` flag is set (as ``update`` sets it), the buffer ``_target_q`` reads
    is the inputs' batch, and ``clip_grad_norm_`` is wrapped to record the gradients it is
    given before it clips them.
    """
    _import_checkout(args.checkout)
    import torch
    from hyperagent.data import Batch
    from hyperagent.policy import HyperAgentPolicy

    _copy_index_before_normalising()
    model = build_model(args.actions)
    load_state(model, args.state)
    optim = torch.optim.Adam([{"params": (p for name, p in model.named_parameters()
                                          if "prior" not in name)}], lr=1e-4, eps=1.5e-4)
    policy = HyperAgentPolicy(model=model, optim=optim, seed=0, **POLICY_ARGS)
    load_state(policy.model_old, args.target_state)
    policy.train()
    policy.updating = True
    policy.max_action_num = args.actions
    with np.load(args.inputs) as f:
        x = {k: np.array(f[k]) for k in f.files}
    batch = Batch(obs=x["obs"], obs_next=x["obs_next"], act=x["act"].astype(np.int64),
                  returns=x["returns"].astype(np.float32)[:, None],
                  target_noise=x["target_noise"].astype(np.float32), info=Batch())

    class Buffer:
        def __getitem__(self, indices):
            return batch[indices]

    policy.noise_target = {"Q": torch.from_numpy(x["noise_target"].astype(np.float32))}
    target_q = policy._target_q(Buffer(), np.arange(len(batch)))
    policy.noise_update = {"Q": torch.from_numpy(x["noise_update"].astype(np.float32))}
    reg = float(model.Q.regularization(policy.noise_update["Q"].clone()))
    grads: dict[str, np.ndarray] = {}
    clip = torch.nn.utils.clip_grad_norm_

    def recording_clip(parameters, max_norm, *a, **kw):
        parameters = list(parameters)
        names = {id(p): name for name, p in model.named_parameters()}
        grads.update({names[id(p)]: p.grad.detach().numpy().copy() for p in parameters
                      if p.grad is not None})
        return clip(parameters, max_norm, *a, **kw)

    torch.nn.utils.clip_grad_norm_ = recording_clip
    result = policy.learn(batch, sample_num=int(x["sample_num"]))
    np.savez(args.out, target_q=target_q.detach().numpy()[:, 0], loss=result["loss"],
             reg=reg, grad_norm=result["grad_norm"],
             **{f"grad.{name}": g for name, g in grads.items()})


def frames_command(args: argparse.Namespace) -> None:
    """Their training env played with the ``actions`` of ``--inputs`` until the first done.

    The env is ``make_atari_env``'s for ``run_atari.py``'s defaults (``wrap_atari`` with
    ``frame_stack=4``, ``episode_life=True``, ``clip_rewards=True``, ``atari_100k=1``); the one
    change is ``noop_max = 1`` on its ``NoopResetEnv``, so that the reset takes exactly one
    no-op (``randint(1, 2)``) instead of a draw from the global NumPy generator, and a front
    end with its own no-op generator can be set to the same start. Writes ``stacks`` (T + 1,
    4, 84, 84) uint8, the observation after the reset and after every step, and ``rewards``,
    ``dones`` (T,)."""
    _import_checkout(args.checkout)
    legacy_atari()
    from hyperagent.env.atari_wrapper import NoopResetEnv, wrap_atari

    env = wrap_atari(f"{args.game}NoFrameskip-v4", frame_stack=4, episode_life=True,
                     clip_rewards=True, atari_100k=True)
    layer = env
    while not isinstance(layer, NoopResetEnv):
        layer = layer.env
    layer.noop_max = 1
    stacks, rewards, dones = [env.reset()], [], []
    for action in np.load(args.inputs)["actions"]:
        obs, reward, done, _ = env.step(int(action))
        stacks.append(obs)
        rewards.append(reward)
        dones.append(done)
        if done:
            break
    np.savez_compressed(args.out, stacks=np.stack(stacks).astype(np.uint8),
                        rewards=np.asarray(rewards, np.float32), dones=np.asarray(dones))


def _write(path: str, record: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
    os.replace(tmp, path)


def train_command(args: argparse.Namespace) -> None:
    legacy_atari()
    _import_checkout(args.checkout)
    import gym
    import hyperagent.env.utils as env_utils
    import hyperagent.policy as policies
    import torch
    from hyperagent_ref_env import RUN_HYPERAGENT_ARGS

    with np.load(args.probe) as f:
        probe_frames, probe_indices = np.array(f["frames"]), np.array(f["indices"])
    start = time.perf_counter()
    model_cell: list = []
    record = dict(code="reference", seed=args.seed, game=args.game, steps=args.steps,
                  every=args.every, torch=torch.__version__, gym=gym.__version__,
                  rows=[], episodes=[], first_reward_step=None, done=False)
    actions: list[int] = []
    up = [None]

    def measure(step: int) -> None:
        q = q_values(model_cell[0], probe_frames, probe_indices)  # (F, K, A)
        window = actions[-args.every:]
        record["rows"].append(dict(
            step=step, wall_s=time.perf_counter() - start,
            q_std=np.std(q, axis=1).mean(0).tolist(),
            q_std_per_frame=np.std(q, axis=1).tolist(), q_mean=q.mean((0, 1)).tolist(),
            up_share=(float(np.mean(np.asarray(window) == up[0])) if window else None)))
        _write(args.out, record)

    class Policy(policies.HyperAgentPolicy):
        def __init__(self, model, *a, **kw):
            load_state(model, args.state)
            model_cell.append(model)
            super().__init__(model, *a, **kw)
            measure(0)

    class Recorder(gym.Wrapper):
        """The training env, recording actions and rewards, measuring and stopping."""

        def __init__(self, env):
            super().__init__(env)
            up[0] = env.unwrapped.get_action_meanings().index("UP")
            self.episode_return = 0.0

        def step(self, action):
            # Step t's updates follow its env step, so the row of step t is taken when step
            # t + 1 is asked for (that step is not taken), as our trainer measures after them.
            done_steps = len(actions)
            if done_steps and done_steps % args.every == 0:
                measure(done_steps)
            if done_steps >= args.steps:
                raise StopRun
            obs, reward, done, info = self.env.step(action)
            actions.append(int(action))
            step = len(actions)
            self.episode_return += float(reward)
            if reward != 0 and record["first_reward_step"] is None:
                record["first_reward_step"] = step
            if done:
                record["episodes"].append(dict(step=step, clipped_return=self.episode_return))
                self.episode_return = 0.0
            return obs, reward, done, info

    _copy_index_before_normalising()
    make_env = env_utils.make_atari_env
    env_utils.make_atari_env = lambda a: Recorder(make_env(a))
    policies.HyperAgentPolicy = Policy
    log_dir = os.path.join(os.path.dirname(os.path.abspath(args.out)), "reference_logs")
    sys.argv = [RUN_ATARI, f"--seed={args.seed}", f"--task={args.game}NoFrameskip-v4",
                *RUN_HYPERAGENT_ARGS, f"--logdir={log_dir}"]
    record["argv"] = sys.argv[1:]
    torch.set_num_threads(args.threads)
    try:
        runpy.run_path(os.path.join(args.checkout, RUN_ATARI), run_name="__main__")
    except StopRun:
        pass
    record["done"] = len(actions) >= args.steps
    record["wall_s"] = time.perf_counter() - start
    _write(args.out, record)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("qvalues", "train", "update", "frames"))
    parser.add_argument("--checkout", required=True, help="the authors' code")
    parser.add_argument("--state", help="weights (.npz, their keys); all but frames")
    parser.add_argument("--out", required=True, help="the file to write")
    parser.add_argument("--inputs", help="qvalues: frames and indices; update: a batch; "
                        "frames: actions (.npz)")
    parser.add_argument("--target-state", help="update: the target network's weights (.npz)")
    parser.add_argument("--actions", type=int, default=3, help="qvalues: |A|")
    parser.add_argument("--probe", help="train: probe frames and indices (.npz)")
    parser.add_argument("--game", default="Freeway")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--every", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1, help="torch's intra-op threads")
    args = parser.parse_args()
    for name in ("steps", "every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: expected a positive number, got {getattr(args, name)}")
    if args.command == "frames":
        if not args.inputs:
            parser.error("frames needs --inputs")
        frames_command(args)
        return
    if not args.state:
        parser.error(f"{args.command} needs --state")
    if args.command in ("qvalues", "update"):
        if not args.inputs:
            parser.error(f"{args.command} needs --inputs")
        if args.command == "update" and not args.target_state:
            parser.error("update needs --target-state")
        (qvalues_command if args.command == "qvalues" else update_command)(args)
    else:
        if not args.probe:
            parser.error("train needs --probe")
        train_command(args)


if __name__ == "__main__":
    main()
