"""A run's state plumbing, below both training and decoding: train-state templates
(templates.py), checkpoints (checkpoint.py), devices and meshes (devices.py)."""
