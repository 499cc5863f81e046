"""One source's implicit attention, teacher-forced on an output: what a loaded run's
`Translator.saliency` returns, and the steps between its prepared arrays and the attribution
(the options checked against the method and source kind; the output ids made teacher-forced
inputs padded to a multiple of 8, so few shapes compile).

  opts = options('integrated_gradients', 'tokens', steps=64)   # attribution.Options, checked
  a = attribute_output(fn, params, src, ids)                    # src [1, S] (or an image), ids [T]
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from attention_jax.implicit import attribution
from attention_jax.symbols import BOS

PAD_TO = 8   # the teacher-forced length is a multiple of this: one compile per 8 lengths


@dataclasses.dataclass
class Saliency:
  """One source's attribution (Translator.saliency)."""
  output: str                      # the output attributed (decoded, or the reference)
  method: str
  scores: np.ndarray               # [T, S] tokens; images [T, H, W] pixels or [T, H', W'] grid
  weights: np.ndarray              # [T, S] the explicit attention (images [T, H', W'])
  log_probs: np.ndarray            # [T] log p(y_t | y_<t, x) of each output token
  src_tokens: list[str]            # S source pieces, '</s>' last ([] for images)
  tgt_tokens: list[str]            # T output pieces, '</s>' last if it ended


def options(method: str, source: str, **values) -> attribution.Options:
  """attribution.Options(**values) checked for `method` on a `source` model ('tokens' or
  'images'): ValueError naming the valid methods or values, TypeError naming unknown options."""
  attribution.check(method, source)
  try:
    opts = attribution.Options(**values)
  except TypeError:
    valid = [f.name for f in dataclasses.fields(attribution.Options)]
    raise TypeError(f'saliency: unknown option(s) {sorted(set(values) - set(valid))}; '
                    f'valid: {", ".join(valid)}') from None
  return attribution.check_options(opts, source)


def attribute_output(fn, params, src: np.ndarray, ids: np.ndarray) -> attribution.Attribution:
  """fn (attribution.make_attributor's) on one source src [1, ...] teacher-forced on the
  output ids [T] (EOS last): the Attribution of that one row, as NumPy, cut to T outputs."""
  t = -(-len(ids) // PAD_TO) * PAD_TO
  tgt_out = np.zeros((1, t), np.int32)
  tgt_out[0, :len(ids)] = ids
  tgt_in = np.zeros((1, t), np.int32)
  tgt_in[0, :len(ids)] = np.concatenate([[BOS], ids[:-1]])
  a = jax.device_get(fn(params, src, tgt_in, tgt_out))
  n = len(ids)
  return attribution.Attribution(a.scores[0][:n], a.log_probs[0][:n], a.weights[0][:n])
