"""The config tree: every group option composes; unknown names list the choices; values flow through."""

from pathlib import Path

import numpy as np
import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException
from rs_testing import CONF, compose_config, shared_data_dir, train_config

from rs_lightning.cli.train import train
from rs_lightning.validation import ConfigError


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize(
    "group", ["data", "model", "method", "optim", "trainer", "logger", "callbacks", "experiment", "debug"]
)
def test_every_option_composes(group, tmp_path):
    for name in options(group):
        cfg = train_config(tmp_path, [f"{group}={name}"])
        assert cfg.sigma > 0


def test_recipe_follows_the_dataset():
    cfg = compose_config("train", ["data=cifar10", "model=cifar_resnet110", "paths.output_dir=x"])
    assert cfg.optim.optimizer.lr == 0.1 and cfg.optim.max_epochs == 90 and cfg.data.batch_size == 400
    assert cfg.optim.scheduler.step_size == 30
    cfg = compose_config("train", ["data=mnist", "paths.output_dir=x"])
    assert cfg.optim.optimizer.lr == 0.01 and cfg.data.batch_size == 256


@pytest.mark.parametrize("group", ["method", "data", "model"])
def test_unknown_names_list_the_choices(group):
    with pytest.raises(MissingConfigException) as err:
        compose_config("train", [f"{group}=no_such_thing"])
    message = str(err.value)
    assert "no_such_thing" in message and options(group)[0] in message


def test_unknown_key_is_rejected():
    with pytest.raises(ConfigCompositionException):
        compose_config("train", ["sigmaa=0.5"])


@pytest.mark.parametrize(
    ("path", "model"), [("mnist.npz", "lenet"), ("cifar10_subset.npz", "cifar_resnet20")]
)
def test_fast_dev_run_on_shared_npz_data(tmp_path, path, model):
    data = shared_data_dir()
    if data is None:
        pytest.skip("../shared/data is not present")
    result = train(
        train_config(
            tmp_path,
            [
                "data=npz",
                f"data.path={Path(data) / path}",
                f"model={model}",
                "debug=fast_dev_run",
                "logger=none",
            ],
        )
    )
    assert result["metrics"]["train/loss_step"] > 0


def test_the_readme_mnist_command_runs(tmp_path):
    """`python train.py method=gaussian sigma=0.5 data=mnist model=lenet` on torchvision's MNIST layout."""
    rng = np.random.default_rng(0)
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name, shape in [
        ("train-images-idx3-ubyte", (64, 28, 28)),
        ("train-labels-idx1-ubyte", (64,)),
        ("t10k-images-idx3-ubyte", (16, 28, 28)),
        ("t10k-labels-idx1-ubyte", (16,)),
    ]:
        array = rng.integers(0, 10 if len(shape) == 1 else 256, shape, dtype=np.uint8)
        header = bytes([0, 0, 0x08, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
        (raw / name).write_bytes(header + array.tobytes())
    result = train(
        train_config(
            tmp_path / "run",
            [
                "method=gaussian",
                "sigma=0.5",
                "data=mnist",
                "model=lenet",
                f"data.root={tmp_path}",
                "debug=fast_dev_run",
                "logger=none",
            ],
        )
    )
    assert result["metrics"]["train/loss_step"] > 0


@pytest.mark.parametrize(
    ("override", "key"),
    [("data.batch_size=0", "data.batch_size"), ("optim.max_epochs=0", "optim.max_epochs")],
)
def test_bad_training_values_name_the_key(tmp_path, override, key):
    with pytest.raises(ConfigError, match=rf"^{key}=0 is invalid"):
        train(train_config(tmp_path, [override]))
