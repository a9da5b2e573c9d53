"""Every published-setting experiment composes, and runs one training batch (fast_dev_run).

The dataset is swapped for the matching offline copy in ../shared/data (full MNIST; the CIFAR-10 subset),
ARS's composite data keeps its canvas but gets clutter backgrounds (BG-20k is not offline), the batch size
is cut to 8 and ResNet-110 is swapped for ResNet-20 to keep this fast on CPU; the method and its
hyperparameters are the experiment's own.
"""

from pathlib import Path

import pytest
from rs_testing import CONF, shared_data_dir, train_config

from rs_lightning.cli.train import train

EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
CIFAR_NORMALIZATION = ["data.mean=[0.4914,0.4822,0.4465]", "data.std=[0.2023,0.1994,0.2010]"]


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes_and_runs_one_batch(name, tmp_path):
    cfg = train_config(tmp_path, [f"experiment={name}"])
    assert cfg.sigma > 0 and cfg.method._target_.startswith("rs_lightning.methods.")
    dataset = cfg.data._target_.rsplit(".", 1)[-1]
    if dataset == "ImageNetDataModule":
        return  # composing is all we can check without ImageNet on disk
    data = shared_data_dir()
    if data is None:
        pytest.skip("../shared/data is not present")
    npz = "rs_lightning.data.npz.NpzDataModule"
    swap = {
        "MNISTDataModule": [f"data.path={Path(data) / 'mnist.npz'}"],
        # ARS: the objects from the offline copies; BG-20k is not offline, so clutter backgrounds instead
        "CompositeDataModule": [
            "~data.source",
            f"+data.source={{target: {npz}, path: {Path(data) / source}}}",
            "data.background=clutter",
            "data.background_dir=null",
            "data.test_size=16",
        ]
        if (source := "mnist.npz" if "mnist" in name else "cifar10_subset.npz")
        else [],
        "CIFAR10DataModule": [
            f"data.path={Path(data) / 'cifar10_subset.npz'}",
            "data.augment=true",
            *CIFAR_NORMALIZATION,
        ],
    }[dataset]
    model = ["model=cifar_resnet20"] if "CIFARResNet" in cfg.model._target_ else []
    # CAT-RS refuses to train without the soft labels of a pre-trained model (tests/methods/test_catrs.py);
    # for one batch the one-hot fallback exercises the same code
    onehot = ["method.allow_onehot=true"] if cfg.method._target_.endswith(".CATRS") else []
    result = train(
        train_config(
            tmp_path,
            [
                f"experiment={name}",
                *([] if dataset == "CompositeDataModule" else ["data=npz"]),
                *swap,
                *model,
                *onehot,
                "optim.batch_size=8",
                "debug=fast_dev_run",
                "logger=none",
            ],
        )
    )
    assert result["metrics"]["train/loss_step"] == result["metrics"]["train/loss_step"]  # finite, not NaN
