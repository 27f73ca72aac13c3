"""The per-GPU training-memory total on the most-loaded GPU.

Model states (:func:`memsym.terms.model_state.model_state` with the exact parameter count of
the stage) + activations (:mod:`memsym.terms.activations` and :mod:`memsym.terms.schedule`)
+ named allowances (workspace, NCCL buffers, allocator fragmentation), each a registered
symbol with a documented default that a user can set to 0 or to a measured value.

The package composes the total in layers, each module importing only those before it:

* :mod:`memsym.training.traits`: what a job's settings imply (the output stage, the
  activation width, sequence parallelism, the loss kind);
* :mod:`memsym.training.layer_model`: one decoder layer's activations under a job's settings;
* :mod:`memsym.training.output_layer`: one micro-batch's final norm, output layer and loss;
* :mod:`memsym.training.activations`: the activations one stage holds at its peak;
* :mod:`memsym.training.model_states`: one stage's parameter counts and model states;
* :mod:`memsym.training.transients`: the transients of each phase of the step;
* :mod:`memsym.training.totals`: one stage's total and each phase's;
* :mod:`memsym.training.estimate`: the most-loaded stage of a job, evaluated.

The names the package has always offered are re-exported here: ``from memsym.training import
X`` stays the entry point; the helpers the modules share are imported from their own module.
"""

from __future__ import annotations

from ..groups import ACTIVATION_KEYS, ALLOWANCE_KEYS, STATE_KEYS
from ..job import Layout, Training, microbatches
from ..terms.activations import RECOMPUTE
from ..terms.allowances import (ALLOWANCE_TERMS, ALLOWANCES, WORKSPACES, Allowance,
                                allowance_terms, allowance_values)
from ..terms.schedule import SCHEDULES
from .activations import resolved_stage_activations, stage_activations
from .estimate import (TrainingEstimate, arch_values, candidate_stages, job_memory,
                       training_memory, training_values, validate)
from .model_states import STEP_STATE_KEYS, job_stage_parameters, stage_counts
from .totals import (OUTSIDE_ALLOCATOR_KEYS, outside_allocator, phase_parts, phase_totals,
                     resolved_stage_total, stage_total)
from .traits import output_stage
from .transients import PHASES, phase_transients, states_and_transients

__all__ = ["Layout", "Training", "Allowance", "ALLOWANCES", "ALLOWANCE_TERMS", "WORKSPACES",
           "PHASES", "TrainingEstimate", "allowance_values", "phase_totals", "phase_transients",
           "STEP_STATE_KEYS", "allowance_terms", "arch_values", "microbatches", "output_stage",
           "validate", "job_memory", "stage_activations", "stage_total", "training_values",
           "training_memory", "STATE_KEYS", "ACTIVATION_KEYS", "ALLOWANCE_KEYS", "RECOMPUTE",
           "SCHEDULES"]
