"""Evaluation during training: the metrics and their registry (metrics), a split scored
(scoring), the evaluators run on a scored split, by name (evaluators: by length, attribution
against gold alignments, heatmaps, per-sentence records), the records (records) and figures
(plots). The analysis after the fact is analysis/."""
