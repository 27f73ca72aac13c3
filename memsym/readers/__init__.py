"""Readers of real jobs: a Megatron-LM command or launch script, a DeepSpeed config, a torchtitan
TOML or Python config.

Each reader turns a framework's own description of a job into plain data (dicts keyed by memsym's
names) with that framework's defaults and validation rules; nothing read is ever executed.
"""

from .megatron import MegatronJob, read_megatron_args, parse_moe_layer_freq
from .launch_script import read_launch_script, read_argument_file, parse_launch_script, LaunchScript
from .deepspeed import read_deepspeed_config
from .torchtitan import read_torchtitan_toml
from .torchtitan_python import read_torchtitan_config, read_torchtitan_python

__all__ = ["MegatronJob", "read_megatron_args", "parse_moe_layer_freq", "read_launch_script",
           "read_argument_file", "parse_launch_script", "LaunchScript", "read_deepspeed_config",
           "read_torchtitan_toml", "read_torchtitan_config", "read_torchtitan_python"]
