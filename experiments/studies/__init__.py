"""Studies: scripts that answer a research question with measured figures (the attention's
use, integrated gradients' quadrature rules, the classical word aligners, the word-alignment
study end to end), as opposed to the speed benchmarks of experiments/bench."""
