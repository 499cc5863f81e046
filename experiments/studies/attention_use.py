"""Does a trained model read its attention? The teacher-forced loss per target token with the
soft (expected) context, a sampled position and the argmax position, and the entropy and the
largest weight of the attention, on a run's validation split (docs/images.md).

  python -m experiments.studies.attention_use --run=runs/digit_strips_hard --batches=4

Equal losses for the three contexts and an entropy near log S (uniform over the S positions)
mean the decoder does not use what it attends to: it reads the source through its initial
state. RNN decoders (the Transformer has no sampling mode). A mode that does not sample
(soft attention) reads the same soft context for all three rows.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import app, flags
from flax import nnx

from attention_jax import data as data_lib
from attention_jax import workdir as workdir_lib
from attention_jax.loaded import loading
from attention_jax.models import attention
from attention_jax.training import objective

flags.DEFINE_string('run', None, 'A trained run (an RNN decoder).', required=True)
flags.DEFINE_integer('batches', 4, 'Validation batches measured.', lower_bound=1)
flags.DEFINE_integer('batch_size', 64, 'Sentences per batch.', lower_bound=1)
flags.DEFINE_integer('seed', 0, 'The sampled positions\' key.')
FLAGS = flags.FLAGS
CONTEXTS = ('soft', 'sampled', 'argmax')


def sums(model, src, tgt_in, tgt_out, context: str, seed: int) -> jax.Array:
  """-> [4]: Σ CE, tokens, Σ attention entropy, Σ largest weight over the real target tokens."""
  key = jax.random.key(seed)
  sample = {'soft': attention.Sample(key, jnp.ones(src.shape[:1], bool)),
            'sampled': key, 'argmax': None}[context]
  logits, read = model.forward(src, tgt_in, sample_key=sample)
  ce, _ = objective.token_losses(logits, tgt_out)                            # [B, T]
  real = (tgt_out != 0).astype(jnp.float32)
  w = read.weights                                                          # [B, T, S]
  entropy = attention._entropy(w)   # pylint: disable=protected-access  (Hard's own)
  return jnp.stack([jnp.sum(ce * real), jnp.sum(real), jnp.sum(entropy * real),
                    jnp.sum(jnp.max(w, -1) * real)])


def main(argv):
  del argv
  t = loading.load(FLAGS.run)
  if t.model_configs[0].arch != 'rnn':
    raise app.UsageError(f'{FLAGS.run} is a {t.model_configs[0].arch} run; '
                         'attention_use reads RNN decoders')
  model = nnx.merge(t.graphdef, t.params)
  cfg = ml_collections.ConfigDict(workdir_lib.Run(FLAGS.run).config()['data'])
  task = data_lib.load_task(cfg)
  fn = jax.jit(functools.partial(sums, model), static_argnums=(3,))
  total = {c: np.zeros(4) for c in CONTEXTS}
  positions = 0
  for i, batch in enumerate(task.eval_batches('validation', FLAGS.batch_size)):
    if i == FLAGS.batches:
      break
    src, tin, tout = (jnp.asarray(batch[k]) for k in ('src', 'tgt_in', 'tgt_out'))
    for c in CONTEXTS:
      total[c] += np.asarray(fn(src, tin, tout, c, FLAGS.seed))
    positions = int(np.max(np.sum(np.asarray(model.source_mask(src)), -1)))
  print(f'{FLAGS.run}: {int(total["soft"][1])} validation target tokens; uniform attention over '
        f'{positions} positions has entropy {np.log(max(positions, 1)):.2f} nats')
  print('| context | loss per token | attention entropy (nats) | largest weight |')
  print('|---|---|---|---|')
  for c, (ce, n, ent, top) in total.items():
    print(f'| {c} | {ce / n:.3f} | {ent / n:.2f} | {top / n:.3f} |')


if __name__ == '__main__':
  app.run(main)
