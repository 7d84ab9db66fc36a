"""MoE dispatch/combine over ``torch.distributed.all_to_all_single`` (backend DEEP_EP).

Runs on any process group that can ``all_to_all_single`` its tensors: NCCL, RCCL, gloo (CPU).

- :mod:`~turbo_deepep.all_to_all.layout`: which rank each token goes to, send order, local ids
  (device-side torch ops, no host sync);
- :mod:`~turbo_deepep.all_to_all.payload`: the packed byte row that carries a token's tensors;
- :mod:`~turbo_deepep.all_to_all.exchange`: the count and payload collectives;
- :mod:`~turbo_deepep.all_to_all.dispatch` / :mod:`~turbo_deepep.all_to_all.combine`: the kernels;
- :mod:`~turbo_deepep.all_to_all.state`: the handle's private layout;
- :mod:`~turbo_deepep.all_to_all.fused` / :mod:`~turbo_deepep.all_to_all.fused_kernels`: the same steps
  as Triton kernels (GPUs);
- :mod:`~turbo_deepep.all_to_all.symm` / :mod:`~turbo_deepep.all_to_all.symm_path`: the fused path's
  symmetric-memory transport (GPUs of one host: rows stored straight into the peers' buffers).

Kernel modules are imported by the registry on first use, never by the plugin.
"""
