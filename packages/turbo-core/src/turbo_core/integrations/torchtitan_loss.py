"""turbo's fused cross entropy as TorchTitan's training loss: ``Trainer.Config.loss =
TurboCrossEntropyLoss.Config()`` (in a ``config_registry`` function, beside the converter).

TorchTitan's own ``CrossEntropyLoss`` casts the logits ``[B, S, V]`` to fp32 and runs
``F.cross_entropy`` on the copy (an fp32 copy of the logits, a log-softmax tensor and their
gradients). turbo's ``cross_entropy`` reads the logits once in the forward and once in the
backward, in their own dtype, with the same fp32 math. Logits sharded over the vocabulary (DTensor
inputs, or loss parallelism over a tensor-parallel mesh) go to TorchTitan's own loss, which
exchanges the partial softmax sums between the ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.distributed.tensor import DTensor
from torchtitan.components.loss import IGNORE_INDEX, CrossEntropyLoss, cross_entropy_loss
from torchtitan.config import CompileConfig
from torchtitan.distributed.spmd_types import spmd_mesh_size
from torchtitan.distributed.utils import get_spmd_backend

from turbo_core.ops.loss import cross_entropy

__all__ = ["TurboCrossEntropyLoss", "turbo_cross_entropy_loss"]


def turbo_cross_entropy_loss(pred: torch.Tensor, labels: torch.Tensor, *,
                             global_vocab_size: int | None = None) -> torch.Tensor:
    """TorchTitan's ``cross_entropy_loss`` contract on turbo's fused cross entropy: ``pred`` ``[B, S, V]``
    (any float dtype, not cast), ``labels`` ``[B, S]`` (``IGNORE_INDEX`` counts for nothing); the fp32
    loss summed over the tokens (the trainer divides by the global count of valid tokens).
    Vocabulary-parallel logits go to TorchTitan's own (see the module doc)."""
    if (isinstance(pred, DTensor) or isinstance(labels, DTensor)
            or (get_spmd_backend() == "spmd_types" and spmd_mesh_size("tp") > 1)):
        return cross_entropy_loss(pred, labels, global_vocab_size=global_vocab_size)
    return cross_entropy(pred.flatten(0, 1), labels.flatten(0, 1), ignore_index=IGNORE_INDEX, reduction="sum")


class TurboCrossEntropyLoss(CrossEntropyLoss):
    """TorchTitan's ``CrossEntropyLoss`` (its config, its scaling by the valid-token count, its
    ``torch.compile`` of the loss when ``compile.components`` lists ``"loss"``) computing
    :func:`turbo_cross_entropy_loss`."""

    @dataclass(kw_only=True, slots=True)
    class Config(CrossEntropyLoss.Config):
        pass

    def __init__(self, config: Config, *, compile_config: CompileConfig | None = None):
        super().__init__(config, compile_config=None)
        self.fn = turbo_cross_entropy_loss
        self._maybe_compile(compile_config)
