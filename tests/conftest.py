"""Test-session settings. Unit tests compile many tiny graphs, so XLA's backend
optimisation is turned down (halves compile time; results are the same up to float
rounding). Set ATTENTION_JAX_TEST_XLA_OPT=1 to test with full optimisation."""

import os

if os.environ.get('ATTENTION_JAX_TEST_XLA_OPT') != '1':
  os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                             ' --xla_backend_optimization_level=0').strip()
