"""Sweeps of attention variants over seeds: the sweep file, its variants and runs, and what
a re-run skips, resumes or names as changed (sweep); the executors that run them: this
machine's processes, several per device (local_executor), or Ray on one machine or a cluster
(ray_executor); and what either records of a run's process (attempts)."""
