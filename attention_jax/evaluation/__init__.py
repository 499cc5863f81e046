"""Evaluation: the metrics and their registry (metrics), a split scored (scoring), the
evaluators run on a scored split, by name (evaluators: by length, attribution against gold
alignments, heatmaps, per-sentence records), the records (records), a saved run evaluated on
a split or text files (saved_run), runs and seed groups compared with intervals and paired
tests (compare, stats), tables and figures of sweeps and comparisons (report, implicit_study,
plots)."""
