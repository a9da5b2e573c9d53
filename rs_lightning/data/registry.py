"""The data modules a checkpoint may name (:class:`~rs_lightning.registry.Registry`): every data module
defined in a module of this package (:data:`~rs_lightning.data.base.PROJECT_DATA_MODULES`), so train.py
accepts and certify.py rebuilds a new one without a list to extend."""

from __future__ import annotations

from .base import data_modules

DATA_MODULES = data_modules()
