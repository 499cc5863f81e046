"""Where a step's time goes, by kind of work, ours (XLA operations of a jax.profiler trace,
experiments/profile_step.py) beside OpenNMT-py's (aten operations of torch.profiler,
experiments/bench/peer_profile.py): one table that says whether the difference is in the
matrix products, the softmax, top-k, the gathers of beam reordering, the cache writes, the
elementwise work, or outside any operation (the loop's control and the dispatch between
operations: Python and PyTorch's dispatcher on the peer's side).

The mapping is by name, so it is approximate: an XLA fusion is counted by the JAX operation
it came from (its `op_name`'s last part), and a fused operation does the work of several.
"""

from __future__ import annotations

from typing import Any

CATEGORIES = ('matrix products', 'fused attention', 'softmax, log-softmax', 'top-k, sort',
              'gathers (reordering, lookups)', 'cache and history writes', 'elementwise',
              'reductions', 'copies, concatenation, layout', 'other')
OUTSIDE = 'outside any operation (loop control, dispatch)'

_PEER = {
    'matrix products': ('aten::mm', 'aten::addmm', 'aten::bmm', 'aten::baddbmm',
                        'aten::addbmm', 'aten::dot', 'aten::mv', 'aten::addmv'),
    'fused attention': ('aten::_scaled_dot_product_flash_attention_for_cpu',
                        'aten::_scaled_dot_product_flash_attention_for_cpu_backward',
                        'aten::_scaled_dot_product_attention_math'),
    'softmax, log-softmax': ('aten::_softmax', 'aten::_log_softmax', 'aten::softmax',
                             'aten::log_softmax', 'aten::_softmax_backward_data',
                             'aten::_log_softmax_backward_data'),
    'top-k, sort': ('aten::topk', 'aten::sort', 'aten::argsort', 'aten::kthvalue'),
    'gathers (reordering, lookups)': ('aten::index_select', 'aten::gather', 'aten::index',
                                      'aten::embedding', 'aten::embedding_dense_backward',
                                      'aten::take_along_dim', 'aten::masked_select',
                                      'aten::embedding_backward'),
    'cache and history writes': ('aten::index_copy_', 'aten::index_put_', 'aten::scatter',
                                 'aten::scatter_', 'aten::scatter_add_', 'aten::index_add_',
                                 'aten::_index_put_impl_', 'aten::index_fill_'),
    'reductions': ('aten::sum', 'aten::mean', 'aten::max', 'aten::min', 'aten::amax',
                   'aten::norm', 'aten::linalg_vector_norm', 'aten::any', 'aten::all',
                   'aten::argmax', 'aten::logsumexp', 'aten::native_layer_norm',
                   'aten::native_layer_norm_backward', 'aten::std', 'aten::var'),
    'copies, concatenation, layout': ('aten::copy_', 'aten::clone', 'aten::contiguous',
                                      'aten::cat', 'aten::stack', 'aten::_to_copy', 'aten::to',
                                      'aten::empty', 'aten::empty_strided', 'aten::zeros',
                                      'aten::zero_', 'aten::fill_', 'aten::resize_',
                                      'aten::empty_like', 'aten::zeros_like', 'aten::full',
                                      'aten::ones', 'aten::repeat', 'aten::flip',
                                      'aten::as_strided', 'aten::view', 'aten::reshape',
                                      'aten::transpose', 'aten::permute', 'aten::t',
                                      'aten::expand', 'aten::unsqueeze', 'aten::squeeze',
                                      'aten::select', 'aten::slice', 'aten::narrow',
                                      'aten::chunk', 'aten::split', 'aten::unbind',
                                      'aten::_unsafe_view', 'aten::detach', 'aten::alias',
                                      'aten::lift_fresh', 'aten::unfold', 'aten::new_zeros',
                                      'aten::new_empty', 'aten::new_empty_strided'),
}
_PEER_INDEX = {name: cat for cat, names in _PEER.items() for name in names}
# elementwise aten operations: arithmetic, activations, comparisons, masking, dropout's bits
# and the optimizer's fused per-tensor updates
_PEER_ELEMENTWISE = ('add', 'sub', 'mul', 'div', 'neg', 'exp', 'log', 'tanh', 'sigmoid',
                     'relu', 'gelu', 'threshold', 'pow', 'sqrt', 'rsqrt', 'clamp', 'where',
                     'masked_fill', 'eq', 'ne', 'lt', 'le', 'gt', 'ge', 'bitwise', 'logical',
                     'bernoulli', 'native_dropout', 'dropout', 'lerp', 'addcmul', 'addcdiv',
                     'abs', 'sign', 'reciprocal', 'floor', 'remainder', 'fmod', 'maximum',
                     'minimum', 'sin', 'cos', 'erf', '_foreach', 'tanh_backward',
                     'sigmoid_backward', 'silu', 'square', 'lstm_cell', '_thnn_fused_lstm_cell',
                     'nonzero', 'arange', 'rand', 'uniform', 'normal', 'ceil', 'round', 'mse')


def peer_category(name: str) -> str:
  """An aten operation's (or a profiler scope's) category; 'other' if none."""
  if name in _PEER_INDEX:
    return _PEER_INDEX[name]
  if name.startswith('aten::'):
    base = name[len('aten::'):].rstrip('_')
    if any(base == e or base.startswith(e) for e in _PEER_ELEMENTWISE):
      return 'elementwise'
  return 'other'


_OURS_OPCODE = {
    'dot': 'matrix products', 'convolution': 'matrix products',
    'sort': 'top-k, sort', 'gather': 'gathers (reordering, lookups)',
    'dynamic-slice': 'gathers (reordering, lookups)',
    'dynamic-update-slice': 'cache and history writes', 'scatter': 'cache and history writes',
    'reduce': 'reductions', 'reduce-window': 'reductions',
    'copy': 'copies, concatenation, layout', 'transpose': 'copies, concatenation, layout',
    'concatenate': 'copies, concatenation, layout', 'broadcast': 'copies, concatenation, layout',
    'reshape': 'copies, concatenation, layout', 'pad': 'copies, concatenation, layout',
    'slice': 'copies, concatenation, layout', 'iota': 'copies, concatenation, layout',
    'bitcast': 'copies, concatenation, layout', 'copy-start': 'copies, concatenation, layout',
    'rng-bit-generator': 'elementwise',
}
# a fusion by the JAX primitive it came from (the last part of its op_name)
_OURS_PRIMITIVE = {
    'dot_general': 'matrix products', 'conv_general_dilated': 'matrix products',
    'top_k': 'top-k, sort', 'sort': 'top-k, sort', 'argsort': 'top-k, sort',
    'gather': 'gathers (reordering, lookups)', 'dynamic_slice': 'gathers (reordering, lookups)',
    'take_along_axis': 'gathers (reordering, lookups)',
    'dynamic_update_slice': 'cache and history writes', 'scatter': 'cache and history writes',
    'scatter-add': 'cache and history writes', 'scatter_add': 'cache and history writes',
    'reduce_sum': 'reductions', 'reduce_max': 'reductions', 'reduce_min': 'reductions',
    'argmax': 'reductions', 'argmin': 'reductions', 'reduce_and': 'reductions',
    'reduce_or': 'reductions',
    'concatenate': 'copies, concatenation, layout', 'transpose': 'copies, concatenation, layout',
    'broadcast_in_dim': 'copies, concatenation, layout', 'reshape': 'copies, concatenation, layout',
    'pad': 'copies, concatenation, layout', 'slice': 'copies, concatenation, layout',
    'copy': 'copies, concatenation, layout', 'copy_p': 'copies, concatenation, layout',
    'squeeze': 'copies, concatenation, layout', 'iota': 'copies, concatenation, layout',
}


def ours_category(op: dict[str, str]) -> str:
  """An XLA operation's category from its opcode and JAX op_name (profile_step's ops)."""
  name = op.get('op_name', '')
  if 'softmax' in name or 'logsumexp' in name:
    return 'softmax, log-softmax'
  if op['opcode'] in _OURS_OPCODE and op['opcode'] not in ('reduce', 'copy'):
    return _OURS_OPCODE[op['opcode']]
  if op['opcode'] == 'custom-call' and 'top_k' in name:
    return 'top-k, sort'
  primitive = name.rsplit('/', 1)[-1]
  if primitive in _OURS_PRIMITIVE:
    return _OURS_PRIMITIVE[primitive]
  if op['opcode'] in _OURS_OPCODE:
    return _OURS_OPCODE[op['opcode']]
  if op['opcode'] in ('fusion', 'add', 'multiply', 'subtract', 'divide', 'exponential',
                      'tanh', 'logistic', 'select', 'compare', 'maximum', 'minimum', 'convert',
                      'negate', 'log', 'rsqrt', 'sqrt', 'and', 'or', 'not', 'clamp', 'power',
                      'custom-call'):
    return 'elementwise'
  return 'other'


def by_category(ops: list[dict[str, Any]], category, total_ms: float) -> dict[str, float]:
  """-> ms per call for each of CATEGORIES and OUTSIDE (total_ms minus the operations'
  sum, at least 0)."""
  out = dict.fromkeys(CATEGORIES, 0.0)
  for o in ops:
    out[category(o)] += o['ms']
  out[OUTSIDE] = max(total_ms - sum(out[c] for c in CATEGORIES), 0.0)
  return out


def ours_by_category(p: dict[str, Any]) -> dict[str, float]:
  """profile_step.profile's result -> ms per call by category (OUTSIDE: the traced call's
  wall time not inside any operation)."""
  return by_category(p['ops'], ours_category, p['traced_ms'])


def peer_by_category(p: dict[str, Any]) -> dict[str, float]:
  """peer.peer_profile's result -> ms per call by category (OUTSIDE: the profiled call's
  wall time not inside any operation's self time: Python and framework overhead)."""
  return by_category(p['ops'], lambda o: peer_category(o['name']), p['wall_ms'])


def table(ours: dict[str, float], peer: dict[str, float]) -> str:
  """A markdown table: per category, ours and the peer's ms per call and shares."""
  t_ours, t_peer = sum(ours.values()), sum(peer.values())
  lines = ['| where | ours ms | ours share | OpenNMT-py ms | OpenNMT-py share | ours / OpenNMT-py |',
           '|---|---|---|---|---|---|']
  for c in CATEGORIES + (OUTSIDE,):
    a, b = ours.get(c, 0.0), peer.get(c, 0.0)
    if a < 0.005 and b < 0.005:
      continue
    ratio = f'{a / b:.2f}' if b > 0 else '-'
    lines.append(f'| {c} | {a:.1f} | {a / max(t_ours, 1e-9):.0%} | {b:.1f} | '
                 f'{b / max(t_peer, 1e-9):.0%} | {ratio} |')
  lines.append(f'| **all** | **{t_ours:.1f}** | | **{t_peer:.1f}** | | '
               f'**{t_ours / max(t_peer, 1e-9):.2f}** |')
  return '\n'.join(lines)
