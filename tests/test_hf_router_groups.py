"""A grouped MoE router's ``n_group`` and ``topk_group`` read as transformers reads them.

Oracles: transformers 5.25.0's own config classes (``AutoConfig.for_model``) for the values a
config.json leaves out, and its own router modules (``DeepseekV3TopkRouter``,
``Glm4MoeTopkRouter``), run on the CPU, for the files memsym refuses: each raises on them.
"""

from __future__ import annotations

import pytest

from memsym.errors import InvalidValueError
from memsym.model import from_hf_config

from hf_oracle import write_config
from test_peft_expert_params import SHARED

_ROUTERS = {"deepseek_v3": "DeepseekV3TopkRouter", "glm4_moe": "Glm4MoeTopkRouter"}


def _config(mtype: str, **changes) -> dict:
    cfg = {"model_type": mtype, **SHARED[mtype][0], "n_routed_experts": 16}
    for key in ("n_group", "topk_group"):
        cfg.pop(key, None)
    cfg.update(changes)
    return cfg


@pytest.mark.parametrize("mtype", sorted(_ROUTERS))
def test_absent_groups_take_the_config_class_defaults(tmp_path, mtype):
    transformers = pytest.importorskip("transformers")
    cfg = _config(mtype)
    theirs = transformers.AutoConfig.for_model(**cfg)
    extra = from_hf_config(write_config(tmp_path, cfg)).extra
    assert (extra["hf_n_group"], extra["hf_topk_group"]) == (theirs.n_group, theirs.topk_group)
    # DeepSeek-V3's class defaults are not the others' 1 and 1
    assert (theirs.n_group, theirs.topk_group) == ((8, 4) if mtype == "deepseek_v3" else (1, 1))


def _router_raises(mtype: str, cfg: dict) -> bool:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from huggingface_hub.errors import StrictDataclassError
    module = getattr(getattr(transformers.models, mtype), f"modeling_{mtype}")
    try:    # the config class's own validation (a null where it takes int only) or the router
        router = getattr(module, _ROUTERS[mtype])(transformers.AutoConfig.for_model(**cfg))
        torch.nn.init.normal_(router.weight)
        router(torch.randn(1, 5, cfg["hidden_size"]))
    except (RuntimeError, TypeError, ValueError, IndexError, StrictDataclassError):
        return True
    return False


@pytest.mark.parametrize("mtype", sorted(_ROUTERS))
@pytest.mark.parametrize("groups,match", [
    ({"n_group": 3, "topk_group": 1}, "must divide the 16 routed experts"),
    ({"n_group": 16, "topk_group": 1}, "groups of at least 2"),
    ({"n_group": 2, "topk_group": 3}, "topk_group 3 is more than n_group 2"),
    ({"n_group": None, "topk_group": 1}, "'n_group' is null"),
    ({"n_group": 4, "topk_group": None}, "'topk_group' is null")])
def test_groups_transformers_cannot_run_are_refused(tmp_path, mtype, groups, match):
    cfg = _config(mtype, **groups)
    assert _router_raises(mtype, cfg)
    with pytest.raises(InvalidValueError, match=match) as err:
        from_hf_config(write_config(tmp_path, cfg))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("mtype", sorted(_ROUTERS))
def test_groups_transformers_runs_are_read(tmp_path, mtype):
    cfg = _config(mtype, n_group=8, topk_group=8)
    assert not _router_raises(mtype, cfg)
    extra = from_hf_config(write_config(tmp_path, cfg)).extra
    assert (extra["hf_n_group"], extra["hf_topk_group"]) == (8, 8)
