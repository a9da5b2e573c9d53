"""RunRecord and RunSummary: the one stored form of settings.json / summary.json and their reading, the
untagged files of earlier versions (the runs archived under docs/results/) included."""

import dataclasses
import json
from pathlib import Path

import pytest

from rs_lightning.analysis.results import (
    RUN_FORMAT,
    SETTINGS_ADDED_LATER,
    ResultFileError,
    RunRecord,
    RunSummary,
)
from rs_lightning.smoothing import CertificationSpec

ARCHIVED = sorted(p.parent for p in (Path(__file__).parents[2] / "docs" / "results").rglob("settings.json"))


def test_the_spec_comes_first_in_the_spec_order():
    spec_fields = [f.name for f in dataclasses.fields(CertificationSpec)]
    assert [f.name for f in dataclasses.fields(RunRecord)][: len(spec_fields)] == spec_fields


def test_the_stored_form_is_the_settings_dict_with_a_format_tag():
    spec = CertificationSpec(sigma=0.25, n=1000, sampling="sequential")
    extra = {"subset": {"skip": 1, "start": 0, "max": None, "num_inputs": 3}, "dim": 64, "devices": ["cpu"]}
    record = RunRecord(**spec.as_dict(), **extra)
    stored = record.to_dict()
    assert list(stored)[-1] == "format" and stored["format"] == RUN_FORMAT == 1
    every = dict.fromkeys(f.name for f in dataclasses.fields(RunRecord))
    assert stored == {**every, **spec.as_dict(), **extra, "format": 1}
    assert RunRecord.from_dict(json.loads(json.dumps(stored))).spec == spec
    summary = RunSummary({"acr": 0.5, "num_inputs": 3}, {"seconds": 1.0}, record)
    assert list(summary.to_dict()) == ["acr", "num_inputs", "throughput", "settings", "format"]
    assert RunSummary.from_dict(json.loads(json.dumps(summary.to_dict()))).metrics == summary.metrics


def test_settings_written_before_the_new_keys_are_fp32_cohen_certify():
    old = {
        "sigma": 0.25,
        "n0": 100,
        "n": 1000,
        "alpha": 0.001,
        "seed": 0,
        "split": "test",
        "noise_block": 256,
    }
    assert RunRecord.from_dict(old).protocol() == CertificationSpec(sigma=0.25, n=1000).protocol()
    assert set(RunRecord.from_dict({}).protocol().values()) == {None}


@pytest.mark.parametrize("folder", ARCHIVED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_archived_run_loads_with_all_it_recorded(folder):
    stored = json.loads((folder / "settings.json").read_text())
    record = RunRecord.read(folder)
    assert all(getattr(record, key) == value for key, value in stored.items() if key != "format")
    assert all(
        getattr(record, key) == value for key, value in SETTINGS_ADDED_LATER.items() if key not in stored
    )
    assert RunSummary.read(folder).settings == record and record.spec.sigma == stored["sigma"]


@pytest.mark.parametrize("name", ["settings.json", "summary.json"])
def test_a_newer_format_or_a_non_object_is_refused_in_one_line(tmp_path, name):
    read = RunRecord.read if name == "settings.json" else RunSummary.read
    (tmp_path / name).write_text(json.dumps({"format": 2}))
    with pytest.raises(ResultFileError, match=rf"{name} has format=2, .* update rs-lightning") as raised:
        read(tmp_path)
    assert len(str(raised.value).splitlines()) == 1
    (tmp_path / name).write_text("[1, 2]")
    with pytest.raises(ResultFileError, match=rf"{name} is not a JSON object"):
        read(tmp_path)
    assert RunRecord.read(tmp_path / "nowhere") is None


@pytest.mark.parametrize("folder", ARCHIVED[:3], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_identity_and_fingerprint_are_those_of_the_stored_form(tmp_path, folder):
    """Catches: a fingerprint that depends on the in-memory form of a record (tuples, not the lists JSON
    reads back), so a resume's record and the folder's settings.json would not agree on it."""
    record = RunRecord.read(folder)
    as_tuples = dataclasses.replace(record, devices=tuple(record.devices or ()) or None)
    data = record.data | {"input_shape": tuple(record.data["input_shape"])}
    as_tuples = dataclasses.replace(as_tuples, data=data)
    as_tuples.write(tmp_path)
    assert as_tuples.identity() == record.identity() == RunRecord.read(tmp_path).identity()
    assert as_tuples.fingerprint() == record.fingerprint() == RunRecord.read(tmp_path).fingerprint()
    assert dataclasses.replace(record, seed=record.seed + 1).fingerprint() != record.fingerprint()
