"""A run loaded for use, above the decoding kernels: aj.load -> loading ->
translator.Translator (translate, attend, saliency), or several runs decoded as one
(ensemble)."""
