"""strategy — how a training job is split over the GPUs.

The validated parallel config and training settings (``parallel``), the numeric formats
and FP8 recipes (``precision``), n-D tensor parallelism (``tp_nd``), per-layer-group
strategies (``layer_groups``), per-operator sharding (``operator_sharding``), ZeRO offload
(``offload``), the data loader (``data_loading``) and pipeline schedules (``schedule``).
Depends on ``specs`` only.
"""
