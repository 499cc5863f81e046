"""Analysis after the fact, above training: a saved run evaluated on a split or text files
(saved_run), runs and seed groups compared with intervals and paired tests (compare, stats),
a sweep's tables and figures (report, implicit_study, alignment_study), the classical word
aligners beside the neural maps (aligners), a parallel text aligned by a run (aligning), and
the offline explorer page (explorer, explorer_data, explorer_words, explorer_page,
explorer.js)."""
