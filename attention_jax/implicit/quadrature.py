"""Quadrature over α in [0, 1], the path integral of integrated gradients (Sundararajan et
al. 2017): fixed rules (the paper's midpoint Riemann sum, Gauss-Legendre), a rule that places
its nodes where the outputs change ('adaptive'), and adaptive Simpson refined until
completeness holds ('refine').

  alphas, weights = quadrature('gauss_legendre', 16)        # [m], [m]: ∫₀¹ g ≈ Σ w_i g(α_i)
  r = refine(node, m=257, tol=0.01)                          # node(α [k]) -> (f [k, T], c [k, T, *P])
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

RULES = ('midpoint', 'gauss_legendre', 'adaptive', 'refine')   # IG's quadrature over α
ADAPTIVE_GRID = 16    # the adaptive rule's forward passes per node
ADAPTIVE_FLOOR = 0.5  # ... and the share of its cells spread uniformly
REFINE_START = 4      # the refine rule's first, equal cells (9 nodes) ...
REFINE_SPLIT = 4      # ... and the cells it bisects per round (8 new nodes, one batch)
REFINE_FLOOR = 1e-4   # the least output change (nats) its tolerance is relative to


def quadrature(rule: str, m: int, f: Callable[[jax.Array], jax.Array] | None = None
               ) -> tuple[jax.Array, jax.Array]:
  """The m nodes α_i in (0, 1) and weights w_i (Σ w_i = 1) of `rule`: ∫₀¹ g ≈ Σ_i w_i g(α_i).
  'midpoint': α_i = (i + 1/2) / m, w_i = 1/m, error O(1/m²) for a smooth g; 'gauss_legendre':
  the Legendre roots mapped from [-1, 1], exact up to degree 2m - 1 (error falls faster than
  any power of 1/m for an analytic g); 'adaptive': cells sized by where f(α) -> [T] changes
  (adaptive_quadrature; the other rules never call f)."""
  if rule == 'adaptive':
    if f is None:
      raise ValueError("the rule 'adaptive' places its nodes by the outputs along the path: "
                       'pass f(alpha) -> [T]')
    return adaptive_quadrature(f, m)
  if rule == 'midpoint':
    alphas, weights = (np.arange(m) + 0.5) / m, np.full(m, 1.0 / m)
  elif rule == 'gauss_legendre':
    x, w = np.polynomial.legendre.leggauss(m)
    alphas, weights = (x + 1) / 2, w / 2
  else:
    raise ValueError(f'unknown integration rule {rule!r}; valid: {", ".join(RULES)}')
  return jnp.asarray(alphas, jnp.float32), jnp.asarray(weights, jnp.float32)


def adaptive_quadrature(f: Callable[[jax.Array], jax.Array], m: int
                        ) -> tuple[jax.Array, jax.Array]:
  """Nodes and weights of the midpoint rule on m cells of [0, 1] sized by where f changes.

  f(α) -> [T] is evaluated on a grid of ADAPTIVE_GRID·m + 1 points (forward passes only); the
  cells' edges are the quantiles of a density that is ADAPTIVE_FLOOR uniform and the rest the
  total variation Σ_t |Δf_t| per grid interval, so cells are short where the outputs move
  and long where they are flat (a trained model's log-probabilities swing within a small part
  of the path from the zero baseline, which equal cells miss). A flat or linear f gives the
  midpoint rule. Returns alphas [m] (cell midpoints) and weights [m] (cell widths, Σ = 1)."""
  n = ADAPTIVE_GRID * m
  grid = jnp.linspace(0.0, 1.0, n + 1)
  fs = jax.lax.map(f, grid, batch_size=min(n + 1, 64))                         # [n + 1, T]
  tv = jnp.sum(jnp.abs(jnp.diff(fs.astype(jnp.float32), axis=0)), axis=1)      # [n]
  moved = tv / jnp.maximum(jnp.sum(tv), 1e-30)        # all 0 for a flat f: then uniform
  density = ADAPTIVE_FLOOR / n + (1 - ADAPTIVE_FLOOR) * moved
  cum = jnp.concatenate([jnp.zeros(1), jnp.cumsum(density)])
  edges = jnp.interp(jnp.linspace(0.0, 1.0, m + 1), cum / cum[-1], grid)       # [m + 1]
  return (edges[1:] + edges[:-1]) / 2, jnp.diff(edges)


def check_refine_nodes(m: int) -> int:
  """The refine rule's first nodes (2 REFINE_START + 1), or ValueError if m is fewer."""
  first = 2 * REFINE_START + 1
  if m < first:
    raise ValueError(f"the rule 'refine' starts from {first} nodes: steps must be >= {first}, "
                     f'got {m}')
  return first


class Refined(NamedTuple):
  integral: jax.Array   # [T, *P]
  bound: jax.Array      # []: max_t Σ_cells |error| / the largest output change
  nodes: jax.Array      # []: nodes used, n <= m
  alphas: jax.Array     # [m]: where they are (the first n; the rest 0)


def refine(node: Callable[[jax.Array], tuple[jax.Array, jax.Array]], m: int, tol: float,
           outputs: jax.Array | None = None) -> Refined:
  """∫₀¹ c(α) dα by adaptive Simpson, refined where completeness fails.

  node(α [k]) -> (f [k, T], c [k, T, *P]), where Σ_P c(α) = df/dα (integrated gradients'
  per-position terms along the path). A cell [a, b] estimates ∫ c by Simpson's rule, (b -
  a)/6 (c(a) + 4 c(mid) + c(b)), and knows the exact integral of Σ_P c over it: f(b) - f(a);
  its error e [T] is the difference. From REFINE_START equal cells, the REFINE_SPLIT cells of
  largest max_t |e_t| are bisected per round (2 new nodes each, every old node kept) until
  max_t Σ_cells |e_t| -- a bound on the completeness error that no cancellation between cells
  can flatter -- is at most tol · max(max_t |f_t(1) - f_t(0)|, REFINE_FLOOR), or the next
  round would pass m nodes; t runs over `outputs` [T] (bool; default all), so padding neither
  sets the scale nor asks for nodes. A trained model's path swings within a small part of [0,
  1] (docs/implicit_attention.md); the cells shrink there and stay wide elsewhere."""
  first = check_refine_nodes(m)
  cells = (m - 1) // 2
  f0, c0 = node(jnp.linspace(0.0, 1.0, first))                                # [9, T], [9, T, *P]
  alphas = jnp.zeros(m).at[:first].set(jnp.linspace(0.0, 1.0, first))        # [M]
  fs = jnp.zeros((m, *f0.shape[1:]), f0.dtype).at[:first].set(f0)            # [M, T]
  cs = jnp.zeros((m, *c0.shape[1:]), c0.dtype).at[:first].set(c0)            # [M, T, *P]
  start = jnp.arange(REFINE_START)
  lo, mid, hi = (jnp.zeros(cells, jnp.int32).at[:REFINE_START].set(2 * start + k)
                 for k in range(3))                                             # [K] node ids
  real = jnp.ones(f0.shape[1], bool) if outputs is None else outputs           # [T]
  change = jnp.maximum(jnp.max(jnp.where(real, jnp.abs(f0[-1] - f0[0]), 0.0)), REFINE_FLOOR)

  def errors(state):
    """[K, T]: each live cell's Simpson estimate of ∫ df/dα minus f(b) - f(a); 0 for other
    cells and padded outputs."""
    alphas, fs, cs, lo, mid, hi, n, live = state
    g = jnp.sum(cs.reshape(*cs.shape[:2], -1), axis=-1)                        # [M, T] df/dα
    h = (alphas[hi] - alphas[lo])[:, None]
    e = h / 6 * (g[lo] + 4 * g[mid] + g[hi]) - (fs[hi] - fs[lo])               # [K, T]
    return jnp.where((jnp.arange(cells) < live)[:, None] & real[None], e, 0.0)

  def bound(state):
    return jnp.max(jnp.sum(jnp.abs(errors(state)), axis=0)) / change

  def go_on(state):
    return (bound(state) > tol) & (state[6] + 2 * REFINE_SPLIT <= m)

  def split(state):
    alphas, fs, cs, lo, mid, hi, n, live = state
    score = jnp.where(jnp.arange(cells) < live, jnp.max(jnp.abs(errors(state)), axis=1), -1.0)
    pick = jax.lax.top_k(score, REFINE_SPLIT)[1]                               # [S] cells
    a, b, c = lo[pick], mid[pick], hi[pick]
    new = jnp.stack([(alphas[a] + alphas[b]) / 2, (alphas[b] + alphas[c]) / 2], 1).reshape(-1)
    f, cn = node(new)                                                  # [2S, T], [2S, T, *P]
    ids = n + jnp.arange(2 * REFINE_SPLIT).reshape(REFINE_SPLIT, 2)            # [S, 2]
    put = lambda x, v, i: jax.lax.dynamic_update_slice_in_dim(x, v.astype(x.dtype), i, 0)
    alphas, fs, cs = put(alphas, new, n), put(fs, f, n), put(cs, cn, n)
    lo, mid, hi = (lo.at[pick].set(a), mid.at[pick].set(ids[:, 0]), hi.at[pick].set(b))
    lo, mid, hi = put(lo, b, live), put(mid, ids[:, 1], live), put(hi, c, live)  # right halves
    return alphas, fs, cs, lo, mid, hi, n + 2 * REFINE_SPLIT, live + REFINE_SPLIT

  state = jax.lax.while_loop(go_on, split, (alphas, fs, cs, lo, mid, hi, jnp.int32(first),
                                            jnp.int32(REFINE_START)))
  alphas, fs, cs, lo, mid, hi, n, live = state
  h = jnp.where(jnp.arange(cells) < live, alphas[hi] - alphas[lo], 0.0) / 6    # [K]
  w = jnp.zeros(m).at[lo].add(h).at[mid].add(4 * h).at[hi].add(h)              # [M] node weights
  return Refined(jnp.tensordot(w.astype(cs.dtype), cs, axes=1), bound(state), n, alphas)
