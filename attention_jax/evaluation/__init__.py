"""Evaluation: the metrics and their registry (metrics), a split scored by source length with
alignment accuracy, heatmaps and per-sentence records (evaluator, records), a saved run
evaluated on a split or text files (run_eval), runs and seed groups compared with intervals
and paired tests (compare, stats), tables and figures of sweeps and comparisons (report,
plots), and the report of an implicit-attention sweep over seeds (implicit_study)."""
