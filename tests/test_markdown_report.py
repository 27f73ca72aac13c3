"""``memsym estimate --markdown`` (issue 33): the report as Markdown for issues and reviews.

The table is parsed back: its rows add up to its total, and every number is the one
``--json`` reports for the same job (bytes exact, GB and shares from those bytes).
"""

import json
import re

import pytest

from in_process import run

GB = 10**9
JOB = ("estimate", "llama2-7b", "--seq-length", "2048", "--dp", "8", "--gpu", "h100-80gb",
       "--margin", "1GB")


def _table(md: str) -> dict:
    """term -> (bytes, GB, share %, reference) of the Markdown table's rows."""
    rows = {}
    for line in md.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) != 5 or cells[0] == "term" or set(cells[1]) <= set("-:"):
            continue
        key = cells[0].strip("*").replace("\\", "")
        rows[key] = (int(cells[1].replace(",", "")), float(cells[2]),
                     float(cells[3].rstrip(" %")), cells[4])
    return rows


@pytest.mark.parametrize("job", [JOB, ("estimate", "--params", "7B", "--dp", "8",
                                       "--gpu-memory", "80GB")])
def test_markdown_table_sums_to_the_total_and_matches_json(capsys, job):
    code, md, err = run(capsys, *job, "--markdown")
    assert code == 0 and err == ""
    code, out, _ = run(capsys, *job, "--json")
    data = json.loads(out)
    rows = _table(md)
    total = rows.pop("total")
    assert sum(b for b, *_ in rows.values()) == total[0]
    assert {k: v[0] for k, v in rows.items()} == {k: v for k, v in data["bytes"].items()
                                                  if k != "total"}
    assert total[0] == data["bytes"]["total"]
    cap = data["gpu_memory_bytes"]
    for key, (byt, gb, share, _) in {**rows, "total": total}.items():
        assert gb == pytest.approx(byt / GB, abs=5e-4), key
        assert share == pytest.approx(100 * byt / cap, abs=0.05), key
    verdict = "fits" if data["fits"] else "does NOT fit"
    assert f": {verdict}, headroom" in md


def test_markdown_names_sources_dominant_defaults_metric(capsys):
    code, md, _ = run(capsys, *JOB, "--markdown")
    code, out, _ = run(capsys, *JOB, "--json")
    data = json.loads(out)
    rows = _table(md)
    refs = re.findall(r"^(\d+)\. (.*)$", md, re.M)
    # every term's reference points at its own source in the numbered list
    listed = {f"[{n}]": text.replace("\\", "") for n, text in refs}
    for key, (*_, ref) in rows.items():
        if data["sources"].get(key):
            assert listed[ref] == data["sources"][key], key
    assert re.search(r"^Dominant: \S", md, re.M)
    assert "- default: precision = bf16" in md.replace("\\", "")
    assert f"- memory metric: {data['metric']['name']}" in md
    assert "less a 1.000 GB margin (--margin)" in md.replace("\\", "")


@pytest.mark.parametrize("other", ["--json", "--wide"])
def test_markdown_is_exclusive_with_other_forms(capsys, other):
    code, out, err = run(capsys, *JOB, "--markdown", other)
    assert code == 2 and out == "" and "not allowed with argument" in err
