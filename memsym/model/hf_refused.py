"""The ``config.json`` model types transformers builds with layers memsym does not model, each
refused in one line that says what is missing (:func:`memsym.model.hf_config.from_hf_config`),
with no near name suggested: a near name is another model, with another count.

Each entry cites the ``modeling_<type>.py`` lines (transformers 5.25.0) that build what memsym's
:class:`~memsym.model.architecture.Architecture` has no field for; ``tests/test_hf_types_more.py``
builds several of those models on the meta device and finds the module named.  Moved out of
:mod:`memsym.model.hf_config` to keep that module short.
"""

from __future__ import annotations

__all__ = ["NOT_MODELLED"]

NOT_MODELLED: dict = {
    # modeling_deepseek_v4.py: hyper-connections (hc_mult residual streams mixed by Sinkhorn
    # iterations), compressed attention per layer (compress_rates), grouped low-rank output
    # projection (o_groups, o_lora_rank)
    "deepseek_v4": "DeepSeek-V4's hyper-connection residual streams, compressed sparse "
                   "attention and grouped low-rank output projection are not in memsym's "
                   "Architecture",
    # modeling_jetmoe.py (transformers 5.25.0): JetMoeAttention's query and output
    # projections are JetMoeMoA, a mixture of attention heads routed per token (its own top-k
    # router and experts), beside a shared kv_proj; its MLP is JetMoeMoE with a bias vector
    "jetmoe": "JetMoE's mixture of attention heads (query and output projections routed per "
              "token to experts, JetMoeMoA) is not in memsym's Architecture",
    # modeling_openai.py Block.forward: n = ln_1(x + attn(x)), h = ln_2(n + mlp(n)) (post-norm)
    # and OpenAIGPTModel has no final LayerNorm
    "openai-gpt": "GPT-1's post-norm blocks (LayerNorm after each residual add) and its model "
                  "without a final LayerNorm are not in memsym's Architecture",
    # modeling_bitnet.py: BitNetAttention's attn_sub_norm RMSNorm(h) before o_proj (:177) and
    # BitNetMLP's ffn_sub_norm RMSNorm(intermediate_size) before down_proj (:74)
    "bitnet": "BitNet's sub-norms inside attention (an RMSNorm of h before o_proj) and the MLP "
              "(an RMSNorm of intermediate_size before down_proj) are not in memsym's "
              "Architecture",
    # modeling_diffllama.py DiffLlamaAttention (:238-242, :301-304): lambda_q1, lambda_k1,
    # lambda_q2, lambda_k2 of head_dim per layer and two softmax maps per head pair subtracted
    "diffllama": "DiffLlama's differential attention (two softmax maps per head pair weighted by "
                 "learned lambda vectors, then a GroupNorm) is not in memsym's Architecture",
    # modeling_kimi_linear.py KimiLinearDeltaAttention (:631): Kimi Delta Attention with a
    # per-channel forget gate (KimiLinearForgetGate: A_log, dt_bias, low-rank f_a/f_b), a
    # low-rank output gate (g_a/g_b) and q/k/v short convolutions, beside MLA layers
    "kimi_linear": "Kimi Linear's Kimi Delta Attention mixers (a per-channel forget gate and "
                   "low-rank gate projections, not Gated DeltaNet's per-head ones) are not in "
                   "memsym's layer_mixers",
    # transformers 5.25.0 decoder types triaged against memsym's Architecture (issue 32):
    # modeling_longcat_flash.py LongcatFlashDecoderLayer (:450-451): two MLA attentions and two
    # dense MLPs per layer beside one MoE, whose router also picks zero_expert_num identity
    # experts (:135, :214)
    "longcat_flash": "LongCat-Flash's two attentions and two MLPs per layer beside a MoE with "
                     "zero (identity) experts are not in memsym's Architecture",
    # modeling_mimo_v2_flash.py MiMoV2FlashAttention (:339-360): v_head_dim other than
    # head_dim, sliding-window layers with twice the KV heads and sinks on those layers only
    "mimo_v2_flash": "MiMo-V2-Flash's value head size other than its query/key head size, and "
                     "sliding-window layers with twice the KV heads and their own sinks, are "
                     "not in memsym's Architecture",
    # modeling_hy_v4.py: HYV4HyperConnection residual streams (:594, :670) and the sparse
    # attention indexer (:362) beside MLA with sinks
    "hy_v4": "Hy4's hyper-connection residual streams and sparse-attention indexer beside MLA "
             "are not in memsym's Architecture",
    # modeling_laguna.py LagunaDecoderLayer: num_attention_heads_per_layer (:417) and a
    # per-head sigmoid gate g_proj h -> a (:353-355, config.gating "per-head")
    "laguna": "Laguna's per-layer head counts (num_attention_heads_per_layer) and per-head "
              "attention gate are not in memsym's Architecture",
    # modeling_lfm3.py Lfm3Attention.g_proj h -> a, a per-head sigmoid gate on the output
    # (:237-241, :280-281; use_attention_gate)
    "lfm3": "LFM3's per-head attention output gate (g_proj of one logit per head) is not in "
            "memsym's Architecture",
    # modeling_qwen4_exp.py: Qwen4ExpTextGatedResidual hyper-connections (hc_count streams,
    # :1112), per-layer n-gram embeddings (Qwen4ExpTextNGramEmbedding, Qwen4ExpTextPLELayer,
    # :1189, :1299) and the QSA sparse-attention indexer (:769, :952)
    "qwen4_exp_text": "Qwen4-Exp's hyper-connection residual streams, per-layer n-gram "
                      "embeddings and sparse-attention indexer are not in memsym's Architecture",
    "qwen4_exp": "Qwen4-Exp's hyper-connection residual streams, per-layer n-gram embeddings "
                 "and sparse-attention indexer are not in memsym's Architecture",
    # modeling_gemma3n.py: AltUp (altup_num_inputs parallel streams, :992-994), LAuReL low-rank
    # residuals (:927-929), per-layer input embeddings and key/value sharing across layers
    # (kv_sharing_modes, :1165)
    "gemma3n_text": "Gemma 3n's AltUp streams, LAuReL residuals, per-layer input embeddings and "
                    "key/value sharing across layers are not in memsym's Architecture",
    "gemma3n": "Gemma 3n's AltUp streams, LAuReL residuals, per-layer input embeddings and "
               "key/value sharing across layers are not in memsym's Architecture",
    # modeling_dots3_note.py Dots3NoteAttention: MLA with a per-head gate g_proj h -> a (:506),
    # a norm on the rope keys alone (:503) and a sparse-attention indexer (:508)
    "dots3_note_text": "dots3's per-head attention gate, rope-key norm and sparse-attention "
                       "indexer beside MLA are not in memsym's Architecture",
    "dots3_note": "dots3's per-head attention gate, rope-key norm and sparse-attention indexer "
                  "beside MLA are not in memsym's Architecture",
    # modeling_bailing_hybrid.py BailingHybridDeltaAttention (:733-761): a delta-rule mixer with
    # BailingHybridForgetGate (per-channel f_proj h -> h_v, :425), beside MLA layers (:330)
    "bailing_hybrid": "Bailing hybrid's delta-rule mixers with a per-channel forget gate (not "
                      "Gated DeltaNet's per-head one) beside MLA are not in memsym's "
                      "layer_mixers",
    # modeling_doge.py DogeAttention's dynamic-mask A and dt_proj (:262-263) and
    # DogeDecoderLayer's learned residual weights input_residual / post_attention_residual (:447)
    "doge": "Doge's dynamic-mask attention (A, dt_proj) and learned residual weights are not in "
            "memsym's Architecture",
    # modeling_zaya.py: ZayaCCAProjection (convolved q/k, a delayed value projection, :143-177),
    # ZayaResidualScaling (:479-484) and the ZayaRouterMLP router (:494)
    "zaya": "ZAYA's convolved-query/key attention with delayed values, learned residual "
            "scaling and MLP router are not in memsym's Architecture",
    # modeling_kolibri1_1.py: layers that reuse an earlier layer's keys and values
    # (kv_sharing_modes, :274-304) and the index_topk sparse attention (Kolibri1Indexer, :79)
    "kolibri1_1": "Kolibri 1.1's key/value sharing across layers and its top-k sparse "
                  "attention are not in memsym's Architecture",
    # modeling_axk1.py AXK1MoE (:215-218): DeepSeek-V3's MoE with a post_mlp_layernorm on the
    # MoE block's output (a third norm in the MoE layers only)
    "axk1": "A.X K1's RMSNorm on the MoE block's output (a third norm in its MoE layers only) "
            "is not in memsym's Architecture",
    # modeling_axk2.py: AXK2GatedRMSNorm (a low-rank MLP gate in each norm, :76-86), MLA with a
    # q_gate_proj output gate (:514) and a sparse-attention indexer (:537)
    "axk2": "A.X K2's gated RMSNorms (a low-rank MLP in each norm), gated MLA and "
            "sparse-attention indexer are not in memsym's Architecture",
    # modeling_beam.py BeamAttention: an output gate (gate_proj h -> a d_h) with a per-head
    # gate_bias of a (:228-230)
    "beam": "Beam's per-head bias on its attention output gate (gate_bias of one value per "
            "head) is not in memsym's Architecture",
    # modeling_dory.py: normalised-transformer scales (sqk :271, suv_gate :337, lambda_1 :365)
    # and no norms, a logit_scale of V on the LM head (:401)
    "dory": "Dory's normalised-transformer scale vectors (no norms) and per-vocabulary logit "
            "scale are not in memsym's Architecture",
    # modeling_ergo.py: learned residual gates (ErgoResidualGate, :440-454) and a norm per
    # expert (post_expert_norm, :346)
    "ergo": "Ergo's learned residual gates and per-expert output norms are not in memsym's "
            "Architecture",
    # modeling_minimax_m3_vl.py: MiniMaxM3VLIndexer (its own q/k projections and RMSNorms,
    # :493-551) on the "minimax_m3_sparse" layers (:429) and block-sparse attention there
    "minimax_m3_vl_text": "MiniMax-M3's block-sparse attention layers with their own indexer "
                          "(q/k projections and norms) are not in memsym's Architecture",
    # modeling_inkling.py: short convolutions on keys, values (:198) and both residual
    # branches (:592-595), and relative-position logits (r_proj, rel_logits_proj, :196-206)
    "inkling_text": "Inkling's short convolutions on keys, values and both residual branches "
                    "and its relative-position logits are not in memsym's Architecture",
    # transformers 5.25.0 causal-LM types triaged further (issue 32, item 4):
    # modeling_inkling2.py: Inkling2DynamicShortConvolution on keys and values (:397),
    # Inkling2RelativePositionBias (:197), Inkling2BlockAttentionResidual queries (:877);
    # modeling_inkling2_loop.py adds Inkling2LoopMessageGate on q, k and the MLP (:81, :975)
    "inkling2_text": "Inkling 2's short convolutions on keys, values and residual branches, "
                     "relative-position bias and block attention residuals are not in memsym's "
                     "Architecture",
    "inkling2_loop_text": "Inkling 2 Loop's message gates, short convolutions on keys, values "
                          "and residual branches, relative-position bias and block attention "
                          "residuals are not in memsym's Architecture",
    # modeling_hrm_text.py HrmTextModel: two HrmTextStack modules (L_module, H_module, :408-409)
    # iterated in H_cycles x L_cycles, a per-head output gate_proj in attention (:181)
    "hrm_text": "HRM's two recurrent stacks (H and L modules iterated in cycles) and gated "
                "attention are not in memsym's Architecture",
    # modeling_gemma4_assistant.py / modeling_gemma4_unified_assistant.py: a drafter on a
    # backbone's states: pre_projection 2 h_b -> h, post_projection h -> h_b (:124-125 / :129),
    # masked-embedding centroids (:55), attention reusing the backbone's keys and values
    "gemma4_assistant": "Gemma 4's assistant drafter (projections to and from its backbone's "
                        "hidden size, attention on the backbone's keys and values) is not in "
                        "memsym's Architecture",
    "gemma4_unified_assistant": "Gemma 4's assistant drafter (projections to and from its "
                                "backbone's hidden size, attention on the backbone's keys and "
                                "values) is not in memsym's Architecture",
    # modeling_modernbert_decoder.py: ModernBertDecoderPredictionHead (a dense h x h and a norm,
    # :338-344) before the decoder, beside the embedding norm
    "modernbert-decoder": "ModernBERT decoder's prediction head (a dense layer and a norm "
                          "before the output layer) is not in memsym's Architecture",
    # modeling_recurrent_gemma.py RecurrentGemmaRecurrentBlock / RecurrentGemmaRglru (:281, :392)
    "recurrent_gemma": "RecurrentGemma's RG-LRU recurrent blocks are not in memsym's "
                       "layer_mixers",
    # modeling_rwkv.py RwkvSelfAttention (time mixing, :217), RwkvFeedForward (:287)
    "rwkv": "RWKV's time-mixing and channel-mixing blocks are not in memsym's layer_mixers",
    # modeling_xlstm.py xLSTMBlock's mlstm_layer (xLSTMLayer, :1037, :1184)
    "xlstm": "xLSTM's mLSTM blocks are not in memsym's layer_mixers",
    # modeling_blt.py BltLocalEncoder / BltLocalDecoder (:562, :676) with cross-attention to
    # patches, encoder_hash_tok_embedding (:1161)
    "blt": "BLT's byte-level local encoder and decoder (cross-attention to patches, hash n-gram "
           "embeddings) are not in memsym's Architecture",
    # modeling_cpmant.py CpmAntSegmentPositionEmbedding (:418), segment_embedding (:544)
    "cpmant": "CPM-Ant's relative-position attention bias and segment embeddings are not in "
              "memsym's Architecture",
    # modeling_mllama.py MllamaCrossAttentionDecoderLayer (:672-681): cross-attention to the
    # image features with tanh gates
    "mllama": "Mllama's gated cross-attention layers (to image features) are not in memsym's "
              "Architecture",
    # modeling_gpt_neox_japanese.py GPTNeoXJapaneseAttention.dense_bias (:155-157): an output
    # bias in the last layer's attention only
    "gpt_neox_japanese": "GPT-NeoX Japanese's attention output bias in the last layer only "
                         "(dense_bias) is not in memsym's Architecture",
    # modeling_reformer.py LSHSelfAttention / LocalSelfAttention (:416, :1110), reversible
    # layers, AxialPositionEmbeddings (:193)
    "reformer": "Reformer's LSH and local attention, reversible layers and axial position "
                "embeddings are not in memsym's Architecture",
}
"""model_type -> why memsym refuses it (what transformers builds that memsym does not model)."""
