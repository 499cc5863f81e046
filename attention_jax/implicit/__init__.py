"""Implicit attention: attribution methods by name (attribution: gradient, gradient x input,
integrated gradients, SmoothGrad, Grad-CAM), and explicit and implicit maps measured against
gold alignments and boxes (alignment). A run's eval.attribution figures are an evaluator
(evaluation/evaluators.py); a sweep's report of them, analysis/implicit_study.py."""
