"""Training: the loss (objective), the optimiser and the pure train step (steps), the
data-parallel steps over a device mesh (data_parallel), populations of seeds as one vmapped
step (population), signals (preemption), one run's bookkeeping (session), and the one
training loop (loop) that a run alone (train) and a population's members (population_run)
go through. Train-state templates, checkpoints and devices are in attention_jax/state/,
below both training and decoding."""
