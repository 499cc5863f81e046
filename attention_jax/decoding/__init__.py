"""Decoding kernels: greedy (greedy) and beam search (beam) over any model of the contract,
their jit-compiled batch decoders (inference) over a bounded set of shapes (shapes), compiled
ahead of use in a background thread (ahead), with JAX's persistent compilation cache
(compile_cache). A run loaded for use is loaded/."""
