"""Congestion (traffic-routing) games on a road network, and their pure Nash equilibria.

The game of GP-MW's routing experiment (Sessa et al., NeurIPS 2019, section 5.2; the authors'
sessap/noregretgames ``Traffic_Routing``): every origin-destination pair ``i`` with demand
``d_i > 0`` is a player whose actions are its ``K_i <= num_paths`` shortest simple paths (by
length; a path is kept if its free-flow time is below ``max_detour`` times the shortest one's).
Action ``k`` puts the demand on the path's edges, ``x_i^k = d_i 1[e in path k]`` (E,); the joint
action's edge occupancy is ``o = sum_i x_i^{a_i}``, an edge costs the Bureau of Public Roads
travel time ``c_e(o_e) = a_e (1 + b_e (o_e / C_e)^{p_e})`` (free-flow time ``a_e``, capacity
``C_e``, ``b_e = 0.15``, ``p_e = 4`` on Sioux Falls) and player i's loss is its demand's total
travel time ``l_i(a) = <x_i^{a_i}, c(o)>``. The authors' congestion measure is the mean over edges
of ``c_e(o_e) / a_e - 1`` (relative delay).

A weighted congestion game with polynomial costs need not have a pure Nash equilibrium (players
have different demands), so :func:`best_response_equilibrium` runs sequential best-response
dynamics and reports whether it converged; when it does, the point is a pure Nash equilibrium
(no player can lower its travel time alone, checked by :func:`nash_gaps`).

Data: :func:`sioux_falls` is the Sioux Falls network (LeBlanc, Morlok and Pierskalla 1975;
24 nodes, 76 edges, 528 OD pairs) from the Transportation Networks for Research repository, as
the authors' repository ships it, with their scaling (demands and capacities divided by 100).
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Sequence
from importlib import resources
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hyperx._validation import check_int, check_positive, check_shape

Array = jax.Array


class Network(NamedTuple):
    """A directed road network on the host: ``edges (E, 2)`` (0-based node ids), per-edge
    ``capacity``, ``length``, ``free_flow`` time, BPR ``b`` and ``power``, and the
    origin-destination demand matrix ``od_demand (V, V)``."""

    num_nodes: int
    edges: np.ndarray
    capacity: np.ndarray
    length: np.ndarray
    free_flow: np.ndarray
    b: np.ndarray
    power: np.ndarray
    od_demand: np.ndarray


class RoutingGame(NamedTuple):
    """A congestion game as arrays (a pytree: jit and vmap over it).

    ``routes[i, k]`` is player i's k-th action ``x_i^k`` (E,), its demand on the path's edges;
    rows ``k >= num_routes[i]`` are zero padding and never played.
    """

    free_flow: Array    # (E,) a_e
    coef: Array         # (E,) a_e b_e / C_e^{p_e}, so c_e(o) = a_e + coef_e o^{p_e}
    power: Array        # (E,) p_e
    routes: Array       # (N, K, E) float32
    num_routes: Array   # (N,) int32
    demand: Array       # (N,) d_i
    od: Array           # (N, 2) int32 origin and destination (0-based)

    @property
    def num_players(self) -> int:
        return self.routes.shape[0]


def sioux_falls_network(demand_scale: float = 0.01, capacity_scale: float = 0.01) -> Network:
    """The Sioux Falls network, demands and capacities multiplied by the given scales (the
    authors divide both by 100)."""
    check_positive("demand_scale", demand_scale)
    check_positive("capacity_scale", capacity_scale)
    data = json.loads(resources.files("hyperx").joinpath("data/sioux_falls.json").read_text())
    return Network(int(data["nodes"]), np.asarray(data["edges"], np.int64) - 1,
                   np.asarray(data["capacity"]) * capacity_scale, np.asarray(data["length"]),
                   np.asarray(data["free_flow_time"]), np.asarray(data["b"]),
                   np.asarray(data["power"]), np.asarray(data["od_demand"]) * demand_scale)


def _shortest_path(edges: np.ndarray, out_edges: list[list[int]], weights: np.ndarray,
                   source: int, target: int, banned_edges: set[int],
                   banned_nodes: set[int]) -> tuple[float, list[int]] | None:
    """Dijkstra from ``source`` to ``target`` avoiding the banned edges and nodes; returns
    ``(cost, edge ids along the path)`` or None when ``target`` is unreachable."""
    dist = {source: 0.0}
    prev: dict[int, int] = {}
    heap = [(0.0, source)]
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist[u]:
            continue
        if u == target:
            break
        for e in out_edges[u]:
            v = int(edges[e, 1])
            if e in banned_edges or v in banned_nodes:
                continue
            nd = d + weights[e]
            if nd < dist.get(v, np.inf):
                dist[v], prev[v] = nd, e
                heapq.heappush(heap, (nd, v))
    if target not in dist:
        return None
    path, v = [], target
    while v != source:
        path.append(prev[v])
        v = int(edges[prev[v], 0])
    return dist[target], path[::-1]


def k_shortest_paths(edges: np.ndarray, weights: np.ndarray, source: int, target: int,
                     k: int) -> list[list[int]]:
    """The ``k`` shortest simple paths from ``source`` to ``target`` (Yen 1971), as lists of
    edge ids in travel order, shortest first; fewer when fewer simple paths exist.

    Yen's algorithm: path j+1 is the cheapest "spur" that leaves path j's prefix at some node
    (Dijkstra with the prefix's nodes removed and the edges that earlier paths with the same
    prefix take next banned). Equal-cost paths come in the order they were found.
    """
    check_int("k", k)
    edges = np.asarray(edges)
    weights = np.asarray(weights, np.float64)
    if np.any(weights < 0) or not np.all(np.isfinite(weights)):
        raise ValueError("weights: expected finite non-negative edge weights")
    out_edges: list[list[int]] = [[] for _ in range(int(edges.max()) + 1)]
    for e, (u, _) in enumerate(edges):
        out_edges[int(u)].append(e)
    first = _shortest_path(edges, out_edges, weights, source, target, set(), set())
    if first is None:
        return []
    found = [first[1]]
    candidates: list[tuple[float, int, list[int]]] = []
    seen = {tuple(first[1])}
    counter = 0
    while len(found) < k:
        last = found[-1]
        nodes = [source] + [int(edges[e, 1]) for e in last]
        for j in range(len(last)):
            root = last[:j]
            banned_edges = {p[j] for p in found if p[:j] == root}
            spur = _shortest_path(edges, out_edges, weights, nodes[j], target, banned_edges,
                                  set(nodes[:j]))
            if spur is None:
                continue
            path = root + spur[1]
            if tuple(path) not in seen:
                seen.add(tuple(path))
                heapq.heappush(candidates, (float(weights[path].sum()), counter, path))
                counter += 1
        if not candidates:
            break
        found.append(heapq.heappop(candidates)[2])
    return found


def routing_game(network: Network, *, num_paths: int = 5, max_detour: float = 3.0,
                 players: Sequence[tuple[int, int]] | None = None) -> RoutingGame:
    """The congestion game of ``network``: one player per OD pair with positive demand (row-major
    over origins, then destinations, as the authors enumerate them), or the given ``players``.

    Player i's actions are its ``num_paths`` shortest simple paths by edge length, keeping the
    shortest and every other one whose free-flow time is below ``max_detour`` times the
    shortest's (the authors' rule, ``K = 5``, ``max_detour = 3``).
    """
    check_int("num_paths", num_paths)
    check_positive("max_detour", max_detour)
    od = network.od_demand
    if players is None:
        players = [(o, d) for o in range(network.num_nodes) for d in range(network.num_nodes)
                   if od[o, d] > 0]
    if not players:
        raise ValueError("network.od_demand: no origin-destination pair has positive demand")
    num_edges = len(network.edges)
    routes = np.zeros((len(players), num_paths, num_edges), np.float32)
    counts = np.zeros(len(players), np.int32)
    for i, (o, d) in enumerate(players):
        if not (0 <= o < network.num_nodes and 0 <= d < network.num_nodes) or o == d:
            raise ValueError(f"players[{i}]: expected two different node ids in "
                             f"[0, {network.num_nodes - 1}], got {(o, d)}")
        paths = k_shortest_paths(network.edges, network.length, o, d, num_paths)
        if not paths:
            raise ValueError(f"players[{i}]: node {d} is unreachable from node {o}")
        shortest = network.free_flow[paths[0]].sum()
        kept = [p for j, p in enumerate(paths)
                if j == 0 or network.free_flow[p].sum() < max_detour * shortest]
        for k, path in enumerate(kept):
            routes[i, k, path] = od[o, d]
        counts[i] = len(kept)
    coef = network.free_flow * network.b / network.capacity**network.power
    return RoutingGame(jnp.asarray(network.free_flow, jnp.float32), jnp.asarray(coef, jnp.float32),
                       jnp.asarray(network.power, jnp.float32), jnp.asarray(routes),
                       jnp.asarray(counts), jnp.asarray([od[o, d] for o, d in players],
                                                        jnp.float32),
                       jnp.asarray(players, jnp.int32))


def sioux_falls(*, num_paths: int = 5, max_detour: float = 3.0) -> RoutingGame:
    """The authors' Sioux Falls routing game: 528 players, up to 5 routes each."""
    return routing_game(sioux_falls_network(), num_paths=num_paths, max_detour=max_detour)


def _chosen(game: RoutingGame, actions: Array) -> Array:
    """``x_i^{a_i}`` for every player, (N, E)."""
    return jnp.take_along_axis(game.routes, actions[:, None, None], axis=1)[:, 0]


def occupancy(game: RoutingGame, actions: Array) -> Array:
    """Edge occupancy ``o = sum_i x_i^{a_i}`` (E,) of the joint action ``actions (N,)``."""
    return _chosen(game, actions).sum(0)


def edge_costs(game: RoutingGame, occupancy: Array) -> Array:
    """BPR travel time ``c_e(o_e) = a_e + coef_e o_e^{p_e}`` of every edge (E,)."""
    return game.free_flow + game.coef * occupancy**game.power


def travel_times(game: RoutingGame, actions: Array) -> Array:
    """Every player's loss ``l_i(a) = <x_i^{a_i}, c(o)>`` (N,)."""
    chosen = _chosen(game, actions)
    return chosen @ edge_costs(game, chosen.sum(0))


def deviation_travel_times(game: RoutingGame, actions: Array) -> Array:
    """``l_i(k, a_{-i})`` for every player i and route k, the others' routes fixed (N, K); padded
    routes are ``inf``. Player i's full-information feedback and its regret's comparator."""
    chosen = _chosen(game, actions)
    others = chosen.sum(0) - chosen                                   # (N, E)
    costs = edge_costs(game, others[:, None, :] + game.routes)        # (N, K, E)
    times = jnp.sum(game.routes * costs, axis=-1)
    valid = jnp.arange(game.routes.shape[1]) < game.num_routes[:, None]
    return jnp.where(valid, times, jnp.inf)


def relative_delay(game: RoutingGame, occupancy: Array) -> Array:
    """The authors' congestion measure: the mean over edges of ``c_e(o_e) / a_e - 1``."""
    return jnp.mean(game.coef * occupancy**game.power / game.free_flow)


def nash_gaps(game: RoutingGame, actions: Array, movable: Array | None = None) -> Array:
    """How much each player would save by switching routes alone, ``l_i(a) - min_k l_i(k,
    a_{-i}) >= 0`` (N,); zero for players not ``movable`` (N,) bool. All zero at a pure Nash
    equilibrium."""
    gaps = travel_times(game, actions) - deviation_travel_times(game, actions).min(1)
    return gaps if movable is None else jnp.where(movable, gaps, 0.0)


class Equilibrium(NamedTuple):
    actions: Array      # (N,) int32
    sweeps: Array       # () int32, best-response sweeps run
    converged: Array    # () bool, a sweep changed no route
    total_travel_time: Array
    relative_delay: Array


def best_response_equilibrium(game: RoutingGame, movable: Array | None = None,
                              actions: Array | None = None, *, max_sweeps: int = 200,
                              rtol: float = 1e-6) -> Equilibrium:
    """Sequential best-response dynamics from ``actions`` (default: everyone's shortest path).

    Each sweep visits the ``movable`` players (N,) bool (default all) in order; a player switches
    to its cheapest route if that saves more than ``rtol`` times its current travel time. Stops
    after a sweep with no switch (``converged``: a pure Nash equilibrium among the movable
    players, the others fixed) or ``max_sweeps`` sweeps. Weighted congestion games can cycle,
    so check ``converged``.
    """
    check_int("max_sweeps", max_sweeps)
    check_positive("rtol", rtol, allow_zero=True)
    n = game.num_players
    movable = jnp.ones(n, bool) if movable is None else jnp.asarray(movable, bool)
    check_shape("movable", movable, (n,))
    actions = jnp.zeros(n, jnp.int32) if actions is None else jnp.asarray(actions, jnp.int32)
    check_shape("actions", actions, (n,))
    valid = jnp.arange(game.routes.shape[1]) < game.num_routes[:, None]

    def visit(i, carry):
        actions, occ, switched = carry
        others = occ - game.routes[i, actions[i]]
        times = jnp.sum(game.routes[i] * edge_costs(game, others + game.routes[i]), axis=-1)
        times = jnp.where(valid[i], times, jnp.inf)
        best = jnp.argmin(times).astype(jnp.int32)
        move = movable[i] & (times[best] < (1.0 - rtol) * times[actions[i]])
        new = jnp.where(move, best, actions[i])
        return actions.at[i].set(new), others + game.routes[i, new], switched | move

    def sweep(carry):
        actions, occ, _, sweeps = carry
        actions, occ, switched = jax.lax.fori_loop(0, n, visit, (actions, occ, False))
        return actions, occ, switched, sweeps + 1

    def again(carry):
        return carry[2] & (carry[3] < max_sweeps)

    init = (actions, occupancy(game, actions), jnp.asarray(True), jnp.asarray(0, jnp.int32))
    actions, occ, switched, sweeps = jax.lax.while_loop(again, sweep, init)
    return Equilibrium(actions, sweeps, ~switched, travel_times(game, actions).sum(),
                       relative_delay(game, occ))
