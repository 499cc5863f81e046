"""Measuring: FLOPs counted on a jaxpr, XLA's own counts and buffer sizes, peak RSS,
timed windows, and the machine's matmul ceiling (large, and small in a loop)."""

from __future__ import annotations

import os
import platform
import resource
import statistics
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from attention_jax.symbols import EOS


MATMUL_N = 2048


def count_flops(closed_jaxpr) -> tuple[int, int]:
  """-> (matmul FLOPs, other FLOPs) of a jaxpr, loops included.

  dot_general: 2 x (output elements) x (contracted size). Any other primitive: one FLOP per
  output element (XLA's cost model counts elementwise ops the same way). A scan counts its
  body `length` times; a while loop's trip count is unknown, so its body counts once; a cond
  counts its most expensive branch; a shard_map its body times the mesh's device count.
  """
  dot = other = 0
  for eqn in getattr(closed_jaxpr, 'jaxpr', closed_jaxpr).eqns:
    name, params = eqn.primitive.name, eqn.params
    if name == 'scan':
      d, o = count_flops(params['jaxpr'])
      dot, other = dot + d * params['length'], other + o * params['length']
    elif name == 'while':
      d, o = count_flops(params['body_jaxpr'])
      dot, other = dot + d, other + o
    elif name == 'cond':
      branches = [count_flops(b) for b in params['branches']]
      dot += max(b[0] for b in branches)
      other += max(b[1] for b in branches)
    elif name == 'dot_general':
      (contract, _), _ = params['dimension_numbers']
      lhs = eqn.invars[0].aval.shape
      out = eqn.outvars[0].aval.shape
      dot += 2 * int(np.prod(out)) * int(np.prod([lhs[i] for i in contract]))
    else:
      inner = next((params[k] for k in ('jaxpr', 'call_jaxpr', 'fun_jaxpr')
                    if k in params and hasattr(getattr(params[k], 'jaxpr', params[k]), 'eqns')),
                   None)
      if inner is not None:   # pjit, custom_jvp / custom_vjp, remat, shard_map, ...
        d, o = count_flops(inner)
        # shard_map's body has one device's shapes, and every device of the mesh runs it
        n = params['mesh'].size if name == 'shard_map' else 1
        dot, other = dot + n * d, other + n * o
      else:
        other += sum(int(np.prod(v.aval.shape)) for v in eqn.outvars
                     if hasattr(v.aval, 'shape'))
  return dot, other


def xla_cost_flops(compiled) -> float | None:
  """XLA's own FLOP estimate (counts each loop body once), or None if unavailable."""
  try:
    ca = compiled.cost_analysis()
    ca = ca[0] if isinstance(ca, (list, tuple)) else ca
    return float(ca.get('flops')) if ca and 'flops' in ca else None
  except Exception:  # pylint: disable=broad-except
    return None


def compiled_bytes(compiled) -> int | None:
  """Arguments + outputs + temporaries - donated aliases of a compiled executable."""
  try:
    m = compiled.memory_analysis()
    return int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes -
               m.alias_size_in_bytes)
  except Exception:  # pylint: disable=broad-except
    return None


def maxrss_mb() -> float:
  """The process's peak resident memory so far (Linux reports KiB)."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ---- timing
def median_window(fn: Callable[[], Any], windows: int, per_window: int) -> tuple[float, list]:
  """Runs `fn` per_window times per window, blocking at the window's end.
  -> (median seconds per call, [seconds per call of each window])."""
  times = []
  for _ in range(windows):
    t0 = time.perf_counter()
    for _ in range(per_window):
      out = fn()
    jax.block_until_ready(out)
    times.append((time.perf_counter() - t0) / per_window)
  return statistics.median(times), times


def matmul_flops_per_s(n: int = MATMUL_N, windows: int = 5) -> float:
  """FLOP/s of an n x n float32 matmul (jit, median of `windows` calls)."""
  a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
  f = jax.jit(lambda x: x @ x)
  jax.block_until_ready(f(a))
  t, _ = median_window(lambda: f(a), windows, 1)
  return 2.0 * n ** 3 / t


def loop_matmul_flops_per_s(m: int, k: int, n: int, reps: int = 100, windows: int = 3) -> float:
  """FLOP/s of a recurrent step's matmul: [m, k] x [k, n] (n >= k) repeated `reps` times in
  a jitted loop, each on the previous result (x = tanh(x W)[:, :k]). What a decoder step's
  gate matmul can reach at best, as a yardstick next to the large matmul."""
  x = jax.random.normal(jax.random.key(1), (m, k), jnp.float32)
  w = jax.random.normal(jax.random.key(2), (k, n), jnp.float32) / np.sqrt(k)
  f = jax.jit(lambda x, w: jax.lax.fori_loop(
      0, reps, lambda _, x: jnp.tanh(x @ w)[:, :k], x))
  jax.block_until_ready(f(x, w))
  t, _ = median_window(lambda: f(x, w), windows, 1)
  return 2.0 * m * k * n * reps / t


def pinned(cmd: list[str], cpus: str | None) -> list[str]:
  """cmd, run on the CPUs `cpus` only (taskset's list, e.g. '0'), or anywhere for None."""
  return cmd if cpus is None else ['taskset', '-c', cpus] + cmd


def suppress_eos(params: dict) -> dict:
  """The params with the output layer's EOS bias at -1e9 (the model never ends a sentence)."""
  if 'decoder' not in params:   # the Transformer's output layer is at the top
    return {**params, 'out': {**params['out'], 'bias': params['out']['bias'].at[EOS].set(-1e9)}}
  out = params['decoder']['out']
  out = {**out, 'bias': out['bias'].at[EOS].set(-1e9)}
  return {**params, 'decoder': {**params['decoder'], 'out': out}}


# the vector extensions that decide which kernels XLA and oneDNN/MKL run (issue: an AVX2-only
# EPYC halved our lead over OpenNMT-py): what a benchmark row must name beside its figures
ISA_FLAGS = ('avx2', 'fma', 'avx512f', 'avx512_bf16', 'avx512_vnni', 'amx_tile', 'amx_bf16',
             'amx_int8')


def cpu_isa(cpuinfo: str) -> list[str]:
  """The ISA_FLAGS a /proc/cpuinfo text lists (its first 'flags' line), in ISA_FLAGS' order."""
  flags = next((l.split(':', 1)[1].split() for l in cpuinfo.splitlines()
                if l.startswith('flags')), [])
  return [f for f in ISA_FLAGS if f in flags]


def machine_info() -> dict[str, Any]:
  """The machine a benchmark ran on: the CPU's model, its vector extensions (cpu_isa) and
  core count, any ISA cap set for XLA (--xla_cpu_max_isa) or the peer (ATEN_CPU_CAPABILITY,
  DNNL_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS), the software and the devices."""
  cpu, text = platform.processor(), ''
  try:
    with open('/proc/cpuinfo') as f:
      text = f.read()
    cpu = next((l.split(':', 1)[1].strip() for l in text.splitlines()
                if l.startswith('model name')), cpu)
  except OSError:
    pass
  caps = {k: os.environ[k] for k in ('ATEN_CPU_CAPABILITY', 'DNNL_MAX_CPU_ISA',
                                      'MKL_ENABLE_INSTRUCTIONS') if k in os.environ}
  caps.update({f.split('=', 1)[0].lstrip('-'): f.split('=', 1)[1]
               for f in os.environ.get('XLA_FLAGS', '').split() if f.startswith(
                   '--xla_cpu_max_isa=')})
  return {'cpu': cpu, 'cpu_isa': cpu_isa(text), 'isa_caps': caps,
          'cpu_count': os.cpu_count(), 'platform': platform.platform(),
          'python': platform.python_version(), 'jax': jax.__version__,
          'devices': [str(d) for d in jax.devices()],
          'xla_flags': os.environ.get('XLA_FLAGS', '')}
