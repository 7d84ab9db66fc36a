"""The causal-LM loss of a patched Hugging Face model: transformers' ``ForCausalLMLoss`` contract,
computed by turbo's fused ``cross_entropy``.

transformers' own loss casts the logits ``[B, S, V]`` to fp32 and runs ``F.cross_entropy`` on the
copy (an fp32 copy of the logits, a log-softmax tensor and their gradients: several passes over
``B * S * V`` elements). ``cross_entropy`` reads the logits once in the forward and once in the
backward, in their own dtype, with the same fp32 math.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from turbo_core.ops.loss import cross_entropy

__all__ = ["causal_lm_loss"]


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor, vocab_size: int,
                   num_items_in_batch: torch.Tensor | int | None = None, ignore_index: int = -100,
                   shift_labels: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
    """transformers' ``ForCausalLMLoss`` (the arguments a ``*ForCausalLM.forward`` passes its
    ``loss_function``) on turbo's fused cross entropy.

    Args:
        logits: ``[..., S, vocab_size]``, any float dtype (not cast: the loss math is fp32 inside).
        labels: ``[..., S]`` token ids; position ``i`` predicts ``labels[..., i + 1]``, the last
            position nothing (``ignore_index``). Ignored when ``shift_labels`` is given.
        vocab_size: the classes of the last dim of ``logits``.
        num_items_in_batch: with it, the summed loss divided by it (gradient accumulation over
            micro-batches); without it, the mean over the tokens that count.
        ignore_index: label of the positions that count for nothing.
        shift_labels: ``[..., S]`` targets already aligned with ``logits``.
        kwargs: the other keyword arguments a model forwards (``ForCausalLMLoss`` ignores them too).

    Returns:
        the fp32 scalar loss.
    """
    if shift_labels is None:
        shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    logits = logits.reshape(-1, vocab_size)
    target = shift_labels.reshape(-1).to(logits.device)
    if num_items_in_batch is None:
        return cross_entropy(logits, target, ignore_index=ignore_index)
    loss = cross_entropy(logits, target, ignore_index=ignore_index, reduction="sum")
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss / num_items_in_batch
