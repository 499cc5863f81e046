"""A run's state plumbing, below both training and decoding: train-state templates
(templates.py) and checkpoints (checkpoint.py). Devices and meshes: attention_jax/devices.py."""
