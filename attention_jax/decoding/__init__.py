"""Decoding: greedy (greedy) and beam search (beam) over any model of the contract, their
jit-compiled batch decoders (inference) over a bounded set of shapes (shapes), compiled ahead
of use in a background thread (ahead), with JAX's persistent compilation cache
(compile_cache), and a run loaded for use: aj.load -> loading
-> translator.Translator (translate, attend, saliency), or several runs decoded as one
(ensemble)."""
