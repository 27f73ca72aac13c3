"""A two-layer Llama config.json for the launch readers' tests, and its parameter count.

The model: h 256, 4 heads and 4 KV heads of 64, FFN 512, V 1000, untied: word embedding and
output layer V h each; per layer q, k, v, o h^2 each, the SwiGLU's three h x f matrices and
two RMSNorm weights h; the final norm h.
"""

import json

V, H, F, LAYERS = 1000, 256, 512, 2
TINY = 2 * V * H + LAYERS * (4 * H * H + 3 * H * F + 2 * H) + H
assert TINY == 1_824_000


def tiny_llama(tmp_path, name: str = "tiny-llama", **extra) -> str:
    """The folder ``name`` of the model's config.json (``extra``: more config keys, e.g. its
    dtype)."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": H, "num_hidden_layers": LAYERS,
        "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": F,
        "vocab_size": V, "max_position_embeddings": 4096, "tie_word_embeddings": False,
        **extra}), encoding="utf-8")
    return str(folder)
