"""cost — what a training job costs, in closed form.

The shard of one layer one rank computes (``layer_shard``: what every per-layer cost
takes), per-operator compute costs (``compute``: stacks, operators, roofline, measured
tables; a layer profiled with PyTorch: ``profile_layer``), the parameters each GPU holds
(``parameters``), memory per GPU (``memory``), bytes on the wire (``traffic``), context
parallelism's attention shards (``context_parallel``) and the iteration's lower bound
(``bounds``).  Depends on ``specs`` and ``strategy``.
"""
