"""RunRecord and RunSummary: the one stored form of settings.json / summary.json and their reading, the
untagged files of earlier versions (the runs archived under docs/results/) included."""

import dataclasses
import json
from pathlib import Path

import pytest

from rs_lightning.runs import (
    RUN_FORMAT,
    SETTINGS_ADDED_LATER,
    ResultFileError,
    RunRecord,
    RunSummary,
    fingerprints,
    read_results,
)
from rs_lightning.smoothing import SAMPLERS, CertificationSpec

ARCHIVED = sorted(p.parent for p in (Path(__file__).parents[2] / "docs" / "results").rglob("settings.json"))


def test_the_spec_comes_first_in_the_spec_order():
    spec_fields = [f.name for f in dataclasses.fields(CertificationSpec)]
    assert [f.name for f in dataclasses.fields(RunRecord)][: len(spec_fields)] == spec_fields


def test_the_stored_form_is_the_settings_dict_with_a_format_tag():
    spec = CertificationSpec(sigma=0.25, n=1000, sampling="sequential")
    extra = {"subset": {"skip": 1, "start": 0, "max": None, "num_inputs": 3}, "dim": 64, "devices": ["cpu"]}
    record = RunRecord(**spec.as_dict(), **extra)
    stored = record.to_dict()
    assert list(stored)[-1] == "format" and stored["format"] == RUN_FORMAT == 2
    every = dict.fromkeys(f.name for f in dataclasses.fields(RunRecord))
    assert stored == {**every, **spec.as_dict(), **extra, "format": 2}
    assert stored["sampler"] == {
        "radii": None,
        "first_look": 256,
        "growth": 1.5,
        "beta": 0.05,
        "alpha_spending": "selection",
        "abstain_after": None,
        "futility": True,
    }
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
    samplers = {"iss", "sequential"}  # format 1 stored the sampler's settings under its name
    assert all(
        getattr(record, key) == value for key, value in stored.items() if key not in {"format", *samplers}
    )
    sampling = stored.get("sampling", "cohen")
    later = SAMPLERS[sampling].added_later
    if "sampler" in stored:  # format 2: the sampler's settings, all of them, under "sampler"
        assert record.sampler == (stored["sampler"] or {})
    else:
        settings = stored.get(sampling)
        assert record.sampler == ({} if settings is None else later | settings)  # Cohen's: no settings
    assert record.spec.sampler.as_dict() == record.sampler or sampling == "cohen"
    assert all(
        getattr(record, key) == value for key, value in SETTINGS_ADDED_LATER.items() if key not in stored
    )
    assert RunSummary.read(folder).settings == record and record.spec.sigma == stored["sigma"]


@pytest.mark.parametrize("name", ["settings.json", "summary.json"])
def test_a_newer_format_or_a_non_object_is_refused_in_one_line(tmp_path, name):
    read = RunRecord.read if name == "settings.json" else RunSummary.read
    (tmp_path / name).write_text(json.dumps({"format": 3}))
    with pytest.raises(ResultFileError, match=rf"{name} has format=3, .* update rs-lightning") as raised:
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


FINGERPRINTED = [
    f
    for f in ARCHIVED
    if (f / "certify.tsv").is_file()
    and "protocol" in (f / "certify.tsv").read_text().partition("\n")[0].split("\t")
]


@pytest.mark.parametrize("folder", FINGERPRINTED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_rows_written_before_format_2_keep_their_fingerprint(folder):
    """Catches: a change of the stored layout (format 2 keeps the sampler's settings under ``sampler``, with
    settings added since) that changes the fingerprint of the rows written before it, so that the report
    and a resume would refuse every archived run as "rows of another protocol"."""
    assert fingerprints(read_results(folder / "certify.tsv", ("idx",))) == [
        RunRecord.read(folder).fingerprint()
    ]


@pytest.mark.parametrize(
    "sampler",
    [
        ("sequential", {"radii": [0.0, 0.25, 0.5], "first_look": 256, "growth": 1.5}),
        ("iss", {"decline": "ad", "max_decline": 0.05, "k0": 10, "granularity": 2, "reuse_pilot": False}),
    ],
)
def test_a_format_1_record_keeps_the_fingerprint_format_1_gave_it(sampler):
    """Catches the same for the samplers with settings (the archived rows with a fingerprint are all Cohen's):
    format 1 hashed the identity with each sampler's settings under its name, ``iss`` and ``sequential``
    both present (null unless chosen); a format-1 settings.json read now must hash the same. Settings added
    since (``sequential.beta``, ...) at their old values do not enter; at new values they do."""
    import hashlib

    sampling, settings = sampler
    n0 = 100 if sampling == "sequential" else None
    old = {
        "sigma": 0.5,
        "n0": n0,
        "n": 1000,
        "alpha": 0.001,
        "seed": 0,
        "split": "test",
        "noise_block": 256,
        "mode": "certify",
        "precision": "32",
        "sampling": sampling,
        "iss": None,
        "sequential": None,
        "noise": "gaussian",
        "norm": "l2",
        "checkpoint_sha256": "ab" * 32,
        "model": {"_target_": "m"},
        "data": {"name": "d"},
        "device": "cpu",
        "format": 1,
    }
    old[sampling] = settings
    identity = {k: v for k, v in old.items() if k != "format"}
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    record = RunRecord.from_dict(old)
    assert record.fingerprint() == hashlib.sha256(canonical.encode()).hexdigest()[:16]
    assert record.sampler == SAMPLERS[sampling].added_later | settings
    if sampling == "sequential":
        newer = dataclasses.replace(record, sampler=record.sampler | {"beta": 0.05})
        assert newer.fingerprint() != record.fingerprint()
