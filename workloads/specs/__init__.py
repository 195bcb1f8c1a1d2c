"""specs — what is trained and on which GPU.

Transformer model specs with their parameter and FLOP counts (``models``, multi-head latent
attention in ``mla``), GPU datasheets (``gpus``), MoE token routing (``moe_routing``) and the
layer's recomputation modes (``recompute``: which of a layer's operators a mode re-runs is a
property of the layer, so it sits with the model).  Depends on nothing else in ``workloads``.
"""
