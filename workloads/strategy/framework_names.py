"""What the training frameworks call distsim's keys, for the error an unknown key raises.

People arrive with a DeepSpeed JSON, a PyTorch FSDP / torchtitan TOML, a Megatron-LM
command line or a NeMo recipe, and write its names into a scenario.  A closest-spelling
hint cannot map ``virtual_pipeline_model_parallel_size`` to ``interleave``, so each
section's framework names are listed here with the key that sets the same thing, or with
what distsim does instead where it does not model the setting (the key is then refused,
never ignored).  The names are not aliases: a resolved scenario keeps one spelling.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["COMPUTE_NAMES", "PARALLELISM_NAMES", "STACK_NAMES", "TRAINING_NAMES"]

_HSDP = ("set dp_replicate (HSDP: with fsdp: true, shards within dp·cp/dp_replicate ranks "
         "and all-reduces the reduced shards across the dp_replicate groups)")
_ROTATE = ("set cp_comm_type: torch_allgather or torch_alltoall (PyTorch's context-parallel rotate "
           "methods; p2p, all_gather, a2a, a2a+p2p are Transformer Engine's)")
_INTERLEAVE = "set interleave (model chunks a stage) with schedule: interleaved"
_BUCKETS = ("set bucket_params, in parameters (gradients go by bucket during the last "
            "backward; a bucket larger than the stage sends them all after it)")

#: ``parallelism:`` — Megatron-Core / NeMo arguments, DeepSpeed's ``zero_optimization``,
#: FSDP's and torchtitan's ``parallelism`` settings.
PARALLELISM_NAMES: Mapping[str, str] = MappingProxyType({
    "tensor_model_parallel_size": "set tp", "pipeline_model_parallel_size": "set pp",
    "context_parallel_size": "set cp", "expert_model_parallel_size": "set ep",
    "expert_tensor_parallel_size": "set expert_tp", "data_parallel_size": "set dp",
    "tensor_parallel_degree": "set tp", "pipeline_parallel_degree": "set pp",
    "context_parallel_degree": "set cp", "expert_parallel_degree": "set ep",
    "virtual_pipeline_model_parallel_size": _INTERLEAVE,
    "num_layers_per_virtual_pipeline_stage": _INTERLEAVE,
    "pipeline_parallel_schedule": "set schedule (1f1b, interleaved, gpipe, dualpipev, "
                                  "dualpipe)",
    "sequence_parallelism": "set sequence_parallel",
    "stage": "set zero (DeepSpeed's zero_optimization.stage, 0-3)",
    "zero_stage": "set zero (0-3)", "zero_optimization": "set zero (0-3)",
    "use_distributed_optimizer": "set zero: 1 (Megatron-Core's distributed optimizer "
                                 "shards the optimizer state as ZeRO-1 does)",
    "sharding_strategy": "FULL_SHARD is fsdp: true, NO_SHARD zero: 0, SHARD_GRAD_OP fsdp: "
                         "true with reshard_after_forward: false (pp 1); HYBRID_SHARD: "
                         + _HSDP,
    "data_parallel_shard_degree": "set dp (with fsdp: true); " + _HSDP,
    "data_parallel_replicate_degree": _HSDP, "hsdp": _HSDP, "hybrid_shard": _HSDP,
    "overlap_grad_reduce": _BUCKETS, "overlap_comm": _BUCKETS,
    "reduce_bucket_size": _BUCKETS, "ddp_bucket_size": _BUCKETS, "bucket_size": _BUCKETS,
    "disable_bucketing": "set bucketing (first_chunk: Megatron-Core's DDP buckets only the "
                         "first pipeline stage's first chunk; every_chunk)",
    "allgather_bucket_size": "not modelled: ZeRO-1/2 gathers the updated parameters in "
                             "one call (by gradient bucket with overlap_param_gather)",
    "offload_optimizer": "set offload.optimizer (cpu or nvme)",
    "offload_param": "set offload.params (cpu or nvme; with zero: 3)",
    "cpu_offload": "set offload: {optimizer: cpu, params: cpu} (FSDP's CPUOffload "
                   "offloads the parameters and runs the step on the CPU)",
    "accumulate_allreduce_grads_in_fp32": "set grad_reduce_precision (fp32 or bf16)",
    "grad_reduce_in_fp32": "set grad_reduce_precision (fp32 or bf16)",
    "enable_async_tensor_parallel": "set tp_comm_overlap (with sequence_parallel: true)",
    "hierarchical_context_parallel_sizes": "set cp_a2a_size (the first size: the "
                                           "all-to-all groups of cp_comm_type: a2a+p2p)",
    "context_parallel_rotate_method": _ROTATE, "rotate_method": _ROTATE,
})

#: ``training:`` — batch, precision and recomputation under the frameworks' names.
TRAINING_NAMES: Mapping[str, str] = MappingProxyType({
    "micro_batch_size": "set micro_batch", "train_micro_batch_size_per_gpu":
    "set micro_batch", "local_batch_size": "set micro_batch",
    "global_batch_size": "set global_batch", "train_batch_size": "set global_batch",
    "gradient_accumulation_steps": "set global_batch (micro-batches a step = "
                                   "global_batch / (micro_batch·dp))",
    "seq_length": "set seq_len", "max_position_embeddings": "set seq_len",
    "recompute_granularity": "set recompute (none, selective, op or full)",
    "recompute_method": "set recompute: full (every layer; per-layer choices are "
                        "parallelism.layer_groups)",
    "recompute_num_layers": "set parallelism.layer_groups with recompute: full on the "
                            "layers to recompute",
    "activation_checkpoint": "set recompute (torchtitan's selective op mode is op, "
                             "full is full)",
    "activation_checkpointing": "set recompute (none, selective, op or full)",
    "fp8": "set precision: fp8 (fp8_recipe: delayed, current, blockwise or mxfp8)",
    "float8": "set precision: fp8 (torchtitan's float8, torchao's tensorwise scaling, is "
              "the current recipe: stack torch-compile's default)",
    "bf16": "set precision: bf16", "fp16": "set precision: fp16",
    "mixed_precision": "set precision (bf16, fp16, fp8)",
})

#: ``compute:`` — compilation and graphs.
COMPUTE_NAMES: Mapping[str, str] = MappingProxyType({
    "compile": "set stack: torch-compile (torchtitan with torch.compile; torch-eager "
               "without)",
    "torch_compile": "set stack: torch-compile", "enable_cuda_graph": "set cuda_graphs",
    "cuda_graph": "set cuda_graphs", "framework": "set stack",
})

#: ``compute.stack`` — a framework named where its stack is meant.
STACK_NAMES: Mapping[str, str] = MappingProxyType({
    "deepspeed": "megatron-deepspeed (Megatron-DeepSpeed's kernels; DeepSpeed's ZeRO is "
                 "parallelism.zero and offload)",
    "megatron-deepspeed": "megatron-deepspeed",
    "torchtitan": "torch-compile or torch-eager (torchtitan with and without "
                  "torch.compile; FSDP2 is parallelism.fsdp, float8 precision: fp8)",
    "fsdp": "torch-eager or torch-compile (PyTorch; the sharding is parallelism.fsdp)",
    "fsdp2": "torch-eager or torch-compile (PyTorch; the sharding is parallelism.fsdp)",
    "pytorch": "torch-eager or torch-compile", "torch": "torch-eager or torch-compile",
    "megatron": "megatron-core (today's Megatron-LM) or megatron-lm-2021",
    "megatron-lm": "megatron-core (today's Megatron-LM) or megatron-lm-2021",
    "mcore": "megatron-core", "nemo2": "nemo", "nemo-2": "nemo",
    "megatron-bridge": "nemo (NeMo's and Megatron-Bridge's performance recipes)",
    "te": "transformer-engine",
})
