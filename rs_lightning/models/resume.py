"""Which training checkpoint a run may resume: the one resume rule, applied by train.py to the file it
resolved before any work, and by every method again to whatever file Lightning loads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rs_lightning.validation import ConfigError

if TYPE_CHECKING:
    from .checkpoint import CheckpointMeta


RESUME_MUST_MATCH = ("sigma", "noise", "seed", "method", "model", "data", "optim")
"""What a resumed training run must share with its checkpoint (but :data:`RESUME_MAY_CHANGE`): the weights
and optimizer state were trained under them, and the resumed run writes them into every new checkpoint. A
contract of training, over the checkpoint's metadata (``CheckpointMeta``), not the certification spec's: a
certification run's resume keys are its spec's protocol and identity keys (``RunRecord.identity``)."""
RESUME_MAY_CHANGE = (
    "optim.max_epochs",
    "data.num_workers",
    "data.val_batch_size",
    "data.root",
    "data.path",
    "data.source.root",
    "data.source.path",
    "data.background_dir",
)


def _flat(tree: Any, prefix: str = "") -> dict:
    if not isinstance(tree, dict):
        return {prefix: tree}
    out = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def resume_differences(saved: CheckpointMeta, now: CheckpointMeta) -> list[tuple[str, Any, Any]]:
    """``(key, checkpoint's value, this run's value)`` for each setting of :data:`RESUME_MUST_MATCH`
    (nested keys flattened, e.g. ``method.epsilon``) in which the run resuming from a checkpoint recorded as
    ``saved`` would differ from it; empty when it may resume. The one resume rule: train.py applies it to
    the file it resolved before any work, and every method again to whatever file Lightning loads."""
    flat = [_flat({key: getattr(meta, key) for key in RESUME_MUST_MATCH}) for meta in (saved, now)]
    keys = sorted(set(flat[0]) | set(flat[1]))
    return [
        (key, flat[0].get(key), flat[1].get(key))
        for key in keys
        if flat[0].get(key) != flat[1].get(key) and not key.startswith(RESUME_MAY_CHANGE)
    ]


def check_resumable(saved: CheckpointMeta, now: CheckpointMeta, ckpt_path: Any) -> None:
    """Refuse (ConfigError naming ``ckpt_path`` and the first differences) a resume whose settings differ
    from the checkpoint's (:func:`resume_differences`)."""
    differ = resume_differences(saved, now)
    if differ:
        shown = "; ".join(f"{k}: checkpoint {a!r}, now {b!r}" for k, a, b in differ[:4])
        raise ConfigError(
            "ckpt_path",
            str(ckpt_path),
            "a checkpoint of the same run",
            f"it was trained with other settings ({shown}{' …' if len(differ) > 4 else ''}); resume with "
            "the checkpoint's settings or start a new run in another folder",
        )
