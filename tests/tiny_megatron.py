"""A two-layer Megatron-LM job read from its flags (shared by the precision tests)."""

from memsym.readers.jobs import megatron_job
from memsym.readers.megatron import read_megatron_args

#: A two-layer GPT on two GPUs (hidden 64, 4 heads, sequence 32, a NullTokenizer of 1,000
#: tokens, micro-batch 1) in bf16, without an optimizer flag.
TINY_MODEL_FLAGS = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
                    "--max-position-embeddings 32 --vocab-size 1000 --tokenizer-type NullTokenizer "
                    "--world-size 2 --micro-batch-size 1 --bf16")

#: :data:`TINY_MODEL_FLAGS` under the distributed optimizer.
TINY_FLAGS = f"{TINY_MODEL_FLAGS} --use-distributed-optimizer"


def tiny_megatron_job(flags: str, *, distributed_optimizer: bool = True):
    """memsym's job for :data:`TINY_FLAGS` plus ``flags`` (:data:`TINY_MODEL_FLAGS` plus
    ``flags`` when ``distributed_optimizer`` is False)."""
    base = TINY_FLAGS if distributed_optimizer else TINY_MODEL_FLAGS
    return megatron_job(read_megatron_args(f"{base} {flags}".split()))


def tiny_megatron_states(flags: str):
    """The training states of memsym's job for :data:`TINY_FLAGS` plus ``flags``."""
    return tiny_megatron_job(flags).training.states
