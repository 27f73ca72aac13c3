"""The MTP layer of an NVFP4 job runs in bf16.

Megatron-core's ``MultiTokenPredictionLayer._proj_and_transformer_layer`` enters a
quantization context only under ``config.fp8`` (``get_fp8_context``), else ``nullcontext()``,
with "TODO: currently ignoring FP4 in MTP layers" (megatron/core/transformer/
multi_token_prediction.py:1386-1394 at d98e8a64dd).  The decoder's FP4 contexts are entered
per layer inside ``TransformerBlock.forward`` (transformer_block.py:631-634 and :692-695, the
inner quantization context) and are closed when ``GPTModel`` calls the MTP block
(models/gpt/gpt_model.py:712).  So an FP4 job's MTP layer saves its GEMM inputs at 16 bits:
the bf16 layer counted by hand in ``tests/test_mtp_recompute.py`` (``TRANSFORMER_LAYER`` and
``OUTPUT`` per token), while its decoder layers keep NVFP4 inputs.  Under FP8 the MTP layer
does enter the FP8 context (line 1388), so its layer is the decoder's FP8 one.
"""

from __future__ import annotations

from memsym.job import Layout, Training
from memsym.training import stage_activations

from test_mtp_recompute import A, DENSE, D, F, G, H, OUTPUT, S, TRANSFORMER_LAYER, V


def _acts(precision, key):
    training = Training(seq_length=S, micro_batch_size=1, dropout=False, precision=precision)
    return stage_activations(DENSE, Layout(), training).breakdown(
        s=S, b=1, t=1, c=1, p=1, L=2, h=H, a=A, g=G, d_h=D, f=F, V=V)[key]


def test_fp4_mtp_layer_is_the_bf16_layer_by_hand():
    assert _acts("fp4", "mtp_activations") == S * (TRANSFORMER_LAYER + OUTPUT)
    # the MTP pass's own inputs stay 16-bit too (eh_proj's 2h-wide input 4h a token)
    assert _acts("fp4", "mtp_input_activations") == S * (8 + 2 * H + 2 * H + 2 * 8 + 2 * 2 * H)


def test_the_decoder_layers_stay_nvfp4_and_fp8_mtp_stays_fp8():
    # the same job's decoder layers save NVFP4 GEMM inputs (fewer bytes than bf16), and an FP8
    # job's MTP layer is its FP8 decoder layer (per layer: the 2 decoder layers' term / 2)
    assert _acts("fp4", "layer_activations") < _acts("bf16", "layer_activations")
    fp8_layer = _acts("fp8", "layer_activations") / 2
    assert _acts("fp8", "mtp_activations") == S * OUTPUT + fp8_layer
    assert fp8_layer < S * TRANSFORMER_LAYER
