"""What one training step of each method costs, in forward+backward passes per image relative to Gaussian
augmentation's one: the cost model that bench/methods.py checks against measured steps and that the GPU-hours
estimate (scripts/gpu_hours.py, docs/reproduce.md) scales by."""

from __future__ import annotations

from collections.abc import Mapping


def passes_per_image(method: str, hyper: Mapping, epoch: int | None = None, ds_epoch: int = 0) -> float:
    """Forward+backward passes per training image per epoch, in units of Gaussian's one (an attack step is
    one forward and one input-gradient backward pass; bench/methods.py ``expected_ratio``).

    ``acr_gaming`` (not in the bench): m copies, plus m·S sphere-attack steps from epoch E_ds on.
    """
    if method in ("cohen", "gaussian"):
        return 1.0
    if method == "macer":
        return float(hyper["num_noise_vec"])
    m = int(hyper["num_noise_vec"])
    if method == "consistency":
        return float(m)
    if method == "smoothadv":
        steps = int(hyper["num_steps"])
        return float(m * (steps + 1) if hyper.get("multi_noise", True) else m * steps + 1)
    if method in ("smoothmix", "catrs"):
        return float(m * (int(hyper["num_steps"]) + 2))
    if method == "acr_gaming":
        attack = hyper.get("sphere_attack") and (epoch is None or epoch >= ds_epoch)
        return float(m * (int(hyper["attack_steps"]) + 1) if attack else m)
    raise ValueError(f"no cost model for method {method!r}")
