"""Training: the loss (objective), the optimiser and the pure train step (steps), the
data-parallel steps over a device mesh (data_parallel), populations of seeds as one vmapped
step (population), signals (preemption), and the training loop: one run (train, session) or
a population's members (population_loop). Train-state templates, checkpoints and devices
are in attention_jax/state/, below both training and decoding."""
