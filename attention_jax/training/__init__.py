"""Training: the loss (objective), the train state and the pure train step (steps), the
data-parallel steps over a device mesh (parallel), populations of seeds as one vmapped step
(population), Orbax checkpoints (checkpoint), signals (preemption), and the training loop:
one run (train, session) or a population's members (population_loop)."""
