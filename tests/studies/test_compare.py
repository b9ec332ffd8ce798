"""``regionfed.studies.compare``: the comparison behind ``regionfed compare``, as a library
call — one run folder per privacy setting, the Table-1 markdown, resume."""

import pytest

from regionfed.config import build_config
from regionfed.errors import ConfigError
from regionfed.studies.compare import privacy_settings, resume_compare, run_compare

CONFIG = {"methods": ["majority", "fedavg"], "seeds": 1,
          "data": {"num_queries": 480, "num_regions": 2, "clients_per_region": 2,
                   "vocab_size": 1000},
          "model": {"dim": 32, "heads": 2, "ngram_buckets": 512},
          "training": {"rounds": 1, "sample_rate": 0.8},
          "dp": {"mode": "user", "sigma": 1.0, "clip": 1.0, "noise_seed": 3}}


def test_both_privacy_settings_run_into_their_folders_and_resume(tmp_path):
    out = tmp_path / "cmp"
    done = run_compare(build_config(CONFIG), out, both=True, command="regionfed compare x",
                       progress=False)
    assert [f.name for f in done.folders] == ["no-dp", "dp"]
    assert all((f / "results.json").exists() for f in done.folders)
    assert "Without DP" in done.markdown and "With DP" in done.markdown
    assert (out / "results.md").read_text() == done.markdown
    again = resume_compare(out, command="regionfed compare --resume", progress=False)
    assert [f.name for f in again.folders] == ["no-dp", "dp"]  # started with both
    assert "regionfed compare x\n# resumed with: regionfed compare --resume" in again.markdown


def test_both_needs_dp_and_is_refused_before_any_folder(tmp_path):
    no_dp = build_config({**CONFIG, "dp": {"mode": "off"}})
    assert [t for t, _ in privacy_settings(no_dp, both=False)] == ["Without DP"]
    with pytest.raises(ConfigError, match="--privacy both needs DP"):
        run_compare(no_dp, tmp_path / "cmp", both=True, command="c", progress=False)
    assert not (tmp_path / "cmp").exists()
