"""``memsym models`` and ``memsym gpus``: what a MODEL and ``--gpu`` may name.

``models`` lists the presets with their size and the recipe a job on them starts from (the
defaults of :data:`memsym.job.DEFAULTS`, the same for every preset); ``gpus`` lists the hardware
catalogue with the capacity a job is checked against and where that figure comes from.
"""

from __future__ import annotations

from .option_table import add_command
from .options import emit_json


def add_parser(sub) -> None:
    add_command(sub, run_models, "models", help="the model presets (MODEL names)",
                description="The preset models a MODEL may name (or give a Hugging "
                "Face config.json path, or a Hub model id such as "
                "meta-llama/Llama-3.1-8B[@revision], read through huggingface_hub), "
                "with their size and the recipe a job starts from.")
    add_command(sub, run_gpus, "gpus", help="the GPU catalogue (--gpu names)",
                description="The GPUs --gpu may name: memory as the vendor states it, "
                "the capacity a job is checked against (the total CUDA reports where "
                "a report is cited) and peak dense throughput, each cited.")


def _recipe() -> dict:
    """The recipe every preset job starts from: the job defaults that decide memory."""
    from ..job import DEFAULTS

    return {k: DEFAULTS[k] for k in ("precision", "optimizer", "sharding", "convention",
                                     "recompute", "flash_attention", "dropout", "seq_length",
                                     "micro_batch_size")}


def run_models(args) -> int:
    from ..model import active_parameter_count, parameter_count, preset, preset_names

    rows = []
    for name in preset_names():
        arch = preset(name)
        rows.append({
            "name": name, "params": int(parameter_count(arch)),
            "active_params": int(active_parameter_count(arch)),
            "layers": arch.num_layers, "hidden_size": arch.hidden_size,
            "heads": arch.num_attention_heads,
            "kv_heads": arch.num_query_groups or arch.num_attention_heads,
            "experts": arch.num_experts or 0,
            "max_position_embeddings": arch.max_position_embeddings})
    recipe = _recipe()
    if args.json:
        emit_json({"models": rows, "recipe": recipe,
                   "recipe_source": "memsym.job.DEFAULTS (docs/conventions.md)"})
        return 0
    print(f"{'model':<15}{'params':>17}{'active':>17}{'layers':>7}{'hidden':>7}{'heads':>6}"
          f"{'kv':>4}{'experts':>8}{'positions':>10}")
    for r in rows:
        print(f"{r['name']:<15}{r['params']:>17,}{r['active_params']:>17,}{r['layers']:>7}"
              f"{r['hidden_size']:>7}{r['heads']:>6}{r['kv_heads']:>4}{r['experts']:>8}"
              f"{r['max_position_embeddings'] or '-':>10}")
    print("\nrecipe of every preset job unless its options say otherwise (memsym.job.DEFAULTS): "
          + ", ".join(f"{k} {v}" for k, v in recipe.items()))
    print("a Hugging Face config.json path is a MODEL too (docs/validation.md lists the types), "
          "and so is a Hub model id org/name[@revision] (docs/howto-estimate.md)")
    return 0


def run_gpus(args) -> int:
    from ..hardware import gpu, gpus

    rows = []
    for name in gpus():
        g = gpu(name)
        rows.append({"name": g.name, "memory_stated": f"{g.memory_stated:g} {g.memory_unit}",
                     "capacity_bytes": int(g.capacity_bytes), "capacity_note": g.capacity_note,
                     "bf16_tflops": None if g.bf16 is None else g.bf16 / 1e12,
                     "fp8_tflops": None if g.fp8 is None else g.fp8 / 1e12,
                     "nvlink_gb_s": None if g.nvlink is None else g.nvlink / 1e9,
                     "fp4_tflops": None if g.fp4 is None else g.fp4 / 1e12,
                     "nvlink_domain": g.nvlink_domain, "note": g.note,
                     "source": f"{g.source}, {g.locator}"})
    if args.json:
        emit_json({"gpus": rows, "units": "capacity in bytes; GB = 1e9 bytes"})
        return 0
    print(f"{'gpu':<18}{'stated':>10}{'capacity GB':>13}{'bf16 TF':>9}{'fp8 TF':>8}"
          f"{'NVLink GB/s':>12}  capacity from")
    for r in rows:
        tf = (lambda v: "-" if v is None else f"{v:g}")
        print(f"{r['name']:<18}{r['memory_stated']:>10}{r['capacity_bytes'] / 1e9:>13.2f}"
              f"{tf(r['bf16_tflops']):>9}{tf(r['fp8_tflops']):>8}{tf(r['nvlink_gb_s']):>12}  "
              f"{r['capacity_note']}")
    return 0
