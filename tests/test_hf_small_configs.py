"""Every small Hugging Face config.json of the family tests, read and counted against transformers.

The small configs live beside their families (``tests/test_hf_configs.py``,
``tests/test_hf_more_types.py``, ``tests/test_hf_newer_types.py``); here each one is read (its
``model_type`` kept, a positive count) and, with torch, its count must equal transformers' own
model of the same file on the meta device: every parameter (``transformers_count``) for the
first file's, the language model's (``language_model_count``: a vision-language model's vision
tower and projector left out) for the newer types'.
"""

from __future__ import annotations

import pytest

from memsym.model import from_hf_config, parameter_count

from hf_oracle import language_model_count, transformers_count, write_config
from test_hf_configs import SMALL as CLASSIC
from test_hf_more_types import SMALL as MORE
from test_hf_newer_types import SMALL as NEWER

#: case -> (config, the transformers count it must equal); the three tables' cases are distinct.
CASES = {**{case: (cfg, transformers_count) for case, cfg in CLASSIC.items()},
         **{case: (cfg, language_model_count) for case, cfg in {**MORE, **NEWER}.items()}}


def test_the_tables_share_no_case():
    assert len(CASES) == len(CLASSIC) + len(MORE) + len(NEWER)


@pytest.mark.parametrize("case", sorted(CASES))
def test_small_configs_read(tmp_path, case):
    cfg = CASES[case][0]
    arch = from_hf_config(write_config(tmp_path, cfg))
    assert arch.extra["hf_model_type"] == cfg["model_type"]
    assert parameter_count(arch) > 0


@pytest.mark.torch
@pytest.mark.parametrize("case", sorted(CASES))
def test_small_configs_match_transformers(tmp_path, case):
    cfg, count = CASES[case]
    path = write_config(tmp_path, cfg)
    assert parameter_count(from_hf_config(path)) == count(path)
