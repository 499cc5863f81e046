"""Implicit attention: attribution methods by name (attribution: gradient, gradient x input,
integrated gradients, SmoothGrad, Grad-CAM), explicit and implicit maps measured against gold
alignments and boxes (alignment), and a run's eval.attribution figures (eval_attribution). A
sweep's report of them over seeds is evaluation/implicit_study.py."""
