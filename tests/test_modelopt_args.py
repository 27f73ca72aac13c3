"""ModelOpt's options are Megatron-LM options too: ``pretrain_gpt.py`` adds them when
``nvidia-modelopt`` imports (pretrain_gpt.py:83-90, :525-526 at d98e8a64dd; the options are
``megatron/post_training/arguments.py:add_modelopt_args``, :4-159).  Megatron's GPT-OSS example
(``examples/gptoss/02_train.sh``) passes two of them, ``--export-force-local-attention`` and
``--enable-gpt-oss``; both are read only by ModelOpt's model builder
(``post_training/model_builder.py:185, :298-313, :353``), which ``model_provider.py:55-57``
uses only once ``args.modelopt_enabled`` is set (``--modelopt-enabled``, a distillation teacher
``--export-kd-teacher-load``, or a ModelOpt checkpoint at ``--load``:
``post_training/utils.py:13-30``).
"""

from __future__ import annotations

import json

import pytest

from in_process import estimate
from memsym.readers._megatron_modelopt_flags import MODELOPT
from memsym.readers.megatron_arguments import megatron_arity

#: examples/gptoss/02_train.sh at d98e8a64dd as bash expands it with the script's defaults, but
#: GPUS_PER_NODE=4 (the script reads it from --distributed-config-file): at its default 8 the
#: pipeline size is WORLD_SIZE = 8, and Megatron's validate_args refuses 12 layers on 8 stages
#: (arguments.py:997-998), as the last test shows.  The unquoted ${DATA_ARGS_LIST[@]} splits
#: "--split '99,1,0'" into two words, the quotes kept.
EXAMPLE = [
    'python', '-m', 'torch.distributed.run', '--nproc_per_node', '4', '--nnodes', '1',
    '--master_addr', 'localhost', '--master_port', '29500', '--node_rank', '0',
    'pretrain_gpt.py', '--no-masked-softmax-fusion', '--transformer-impl', 'transformer_engine',
    '--disable-bias-linear', '--untie-embeddings-and-output-weights', '--no-rope-fusion',
    '--normalization', 'RMSNorm', '--num-layers', '12', '--hidden-size', '512',
    '--ffn-hidden-size', '2048', '--num-attention-heads', '64', '--group-query-attention',
    '--num-query-groups', '8', '--seq-length', '8192', '--max-position-embeddings', '8192',
    '--use-mcore-models', '--rotary-percent', '1.0', '--rope-type', 'rope',
    '--position-embedding-type', 'rope', '--rotary-base', '10000', '--no-bias-gelu-fusion',
    '--export-force-local-attention', '--no-bias-dropout-fusion', '--quick-geglu',
    '--glu-linear-offset', '1.0', '--softmax-type', 'learnable', '--window-attn-skip-freq', '2',
    '--activation-func-clamp-value', '7.0', '--window-size', '127,0', '--enable-gpt-oss',
    '--num-experts', '4', '--moe-router-topk', '2', '--moe-router-load-balancing-type',
    'aux_loss', '--moe-aux-loss-coeff', '1e-3', '--moe-grouped-gemm',
    '--moe-token-dispatcher-type', 'alltoall', '--overlap-param-gather', '--overlap-grad-reduce',
    '--moe-ffn-hidden-size', '2048', '--moe-router-dtype', 'fp32', '--moe-z-loss-coeff', '1e-3',
    '--moe-permute-fusion', '--mock-data', '--tokenizer-type', 'NullTokenizer', '--vocab-size',
    '128256', '--data-cache-path', '/work/benchmark_cache_gpt_oss_20b', '--tiktoken-pattern',
    'v2', '--split', "'99,1,0'", '--no-create-attention-mask-in-dataloader',
    '--no-mmap-bin-files', '--num-workers', '1', '--micro-batch-size', '1',
    '--global-batch-size', '128', '--lr', '1.0e-5', '--train-samples', '1953125000',
    '--lr-decay-samples', '1949218748', '--lr-decay-style', 'cosine', '--min-lr', '1.0e-6',
    '--weight-decay', '0.1', '--lr-warmup-fraction', '0.05', '--clip-grad', '1.0', '--bf16',
    '--use-flash-attn', '--attention-softmax-in-fp32', '--accumulate-allreduce-grads-in-fp32',
    '--disable-bf16-reduced-precision-matmul', '--recompute-activations',
    '--tensor-model-parallel-size', '1', '--pipeline-model-parallel-size', '4',
    '--expert-model-parallel-size', '1', '--sequence-parallel', '--context-parallel-size', '1',
    '--use-distributed-optimizer', '--fp8-format', 'hybrid', '--fp8-param-gather',
    '--fp8-amax-compute-algo', 'max', '--fp8-amax-history-len', '1024', '--log-interval', '1',
    '--save-interval', '10000', '--eval-interval', '50000000', '--eval-iters', '0', '--save',
    'NO_VALUE_PROVIDED', '--tensorboard-dir', 'NO_VALUE_PROVIDED/tensorboard',
    '--moe-per-layer-logging', '--no-load-optim', '--no-load-rng', '--log-throughput',
]


def _run(capsys, *argv):
    code, out, err = estimate(capsys, *argv, "--gpu", "h100-80gb")
    return code, out, err


def test_the_gpt_oss_example_pastes(capsys):
    code, out, err = _run(capsys, *EXAMPLE, "--json")
    assert code == 0, err
    data = json.loads(out)
    notes = " ".join(data["notes"])
    for option in ("--export-force-local-attention", "--enable-gpt-oss"):
        assert f"{option}: a ModelOpt option" in notes
        assert option not in data["ignored"]          # noted, not "without effect"
    assert data["layout"]["pp"] == 4


@pytest.mark.parametrize("extra, named", [
    (("--modelopt-enabled",), "--modelopt-enabled (ModelOpt's model builder)"),
    (("--export-kd-teacher-load", "/ckpt/teacher"), "--export-kd-teacher-load (a ModelOpt "
                                                    "distillation teacher"),
])
def test_options_that_switch_modelopt_on_are_refused(capsys, extra, named):
    code, out, err = _run(capsys, *EXAMPLE, *extra)
    assert (code, out) == (2, "") and err.count("\n") == 1 and named in err


def test_a_misspelling_is_offered_the_modelopt_option(capsys):
    code, _, err = _run(capsys, *EXAMPLE, "--enable-gpt-os")
    assert code == 2 and "did you mean --enable-gpt-oss" in err


# add_modelopt_args as argparse defines each (post_training/arguments.py at d98e8a64dd)
@pytest.mark.parametrize("option, row", [
    ("--export-force-local-attention", ("export_force_local_attention", 0, True)),  # :38-41
    ("--enable-gpt-oss", ("enable_gpt_oss", 0, True)),                              # :153-157
    ("--export-kv-cache-quant", ("export_kv_cache_quant", 1, None)),                # :44-48
    ("--finetune-data-files", ("finetune_data_files", "+", None)),                  # :97-103
    ("--modelopt-enabled", ("modelopt_enabled", 0, True)),                          # :146-149
])
def test_rows_match_add_modelopt_args(option, row):
    assert MODELOPT[option] == row
    assert megatron_arity(option) == row[1]
    # 22 add_argument calls, one option string each (:9-157)
    assert len(MODELOPT) == 22


def test_the_example_at_eight_gpus_is_refused_as_megatron_refuses_it(capsys):
    eight = list(EXAMPLE)
    for name in ("--nproc_per_node", "--pipeline-model-parallel-size"):
        eight[eight.index(name) + 1] = "8"
    code, out, err = _run(capsys, *eight)
    assert (code, out) == (2, "") and "not divisible by --pipeline-model-parallel-size 8" in err
