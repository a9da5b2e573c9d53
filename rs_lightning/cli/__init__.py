"""Importable entry points: ``train(cfg)`` and ``certify(cfg)`` (train.py / certify.py are thin wrappers)."""
