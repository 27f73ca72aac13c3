"""The benchmark runs (quick mode) and reports every figure with its target.

This is not a timed test: it asserts the structure and the correctness of what is timed,
never a speed (machines are noisy; `memsym bench` reports ratios).
"""

import json

import numpy as np

from memsym import bench


def test_p1_formula_matches_hand_written_numpy():
    # the compiled total must compute the same formula the hand-written baseline does
    cfg = bench._configs(1000, seed=3)
    got = bench.p1_total().compile()(**cfg)
    ref = bench.hand_numpy(**cfg)
    assert np.allclose(got, ref, rtol=1e-12, atol=0)
    one = {k: float(v[0]) for k, v in cfg.items()}
    assert abs(bench.hand_python(**one) - ref[0]) <= 1e-12 * ref[0]


def test_quick_benchmark_reports_every_target(tmp_path, capsys, monkeypatch):
    from memsym.cli import main

    # the command as users run it, each timing taken once (bench.run's smoke: quick's sizes,
    # every figure measured; the structure and correctness are asserted, never a speed)
    calls = []

    def once(**kw):
        calls.append(kw)
        return run(**kw, smoke=True)

    run = bench.run
    monkeypatch.setattr(bench, "run", once)
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--output", str(out)]) == 0
    assert len(calls) == 1 and calls[0]["quick"] is True and not calls[0]["suite"]
    data = json.loads(out.read_text())
    assert data["mode"] == "smoke"
    assert set(data["targets"]) == set(bench.TARGETS)
    assert data["environment"]["cpus"] >= 1 and data["environment"]["sympy"].startswith("1.14")
    for key in ("p1_vs_numpy", "p1_vs_python", "p1_vs_evalf", "p3_startup_ratio", "p4_solve_ms",
                "p2_llama3_405b_new_process_s", "p2_deepseek_v3_empty_cache_s",
                "p2_min_gpus_s", "p2_min_gpus_empty_cache_s"):
        assert data["targets"][key]["value"] > 0, key
    assert data["p1"]["max_relative_difference_vs_hand"] < 1e-12
    text = capsys.readouterr().out
    assert "target" in text and "P1" in text and "P4" in text
    assert "Llama 3 405B search" in text and "DeepSeek-V3 search" in text


def test_each_cold_search_is_a_row_of_its_own():
    # issue 29: Llama 3 405B on 16,384 GPUs, DeepSeek-V3 on 2,048 and `memsym min-gpus`, each
    # in a new process (compile cache on disk and empty), and `memsym estimate` / import sympy
    assert {label for label, *_ in bench.P2_CASES} == {"llama3-405b", "deepseek-v3"}
    for key in ("p2_llama3_405b_new_process_s", "p2_llama3_405b_empty_cache_s",
                "p2_deepseek_v3_new_process_s", "p2_deepseek_v3_empty_cache_s",
                "p2_min_gpus_s", "p2_min_gpus_empty_cache_s"):
        assert bench.TARGETS[key] == (1.0, "max"), key
    assert bench.TARGETS["p3_startup_ratio"] == (1.2, "max")
