"""Synthetic text with learnable structure: a fixed random first-order Markov chain, with a dense
transition matrix (:class:`MarkovData`, small vocabularies) or a successor table
(:class:`SparseMarkovData`, vocabularies of real models)."""

from __future__ import annotations

import torch

__all__ = ["MarkovData", "SparseMarkovData"]


class MarkovData:
    """Token sequences drawn from a fixed random Markov chain over ``vocab`` tokens.

    Each token has ``fanout`` possible successors (chosen at random, with random Dirichlet-like
    weights), so the best achievable next-token loss is at most ``ln(fanout)`` nats while an
    untrained model starts near ``ln(vocab)``. Everything is drawn from a CPU ``torch.Generator``
    seeded with ``seed``: the same seed gives the same chain and the same batches on any device.

    ``batch(batch, seq)`` returns ``(inputs, targets)``, int64 ``[batch, seq]`` each (targets are
    the inputs shifted by one), on the CPU.
    """

    def __init__(self, vocab: int, *, fanout: int = 4, seed: int = 0) -> None:
        if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 2:
            raise ValueError(f"vocab: expected an int >= 2, got {vocab!r}")
        if isinstance(fanout, bool) or not isinstance(fanout, int) or not 1 <= fanout <= vocab:
            raise ValueError(f"fanout: expected an int in [1, vocab={vocab}], got {fanout!r}")
        self.vocab = vocab
        self.gen = torch.Generator().manual_seed(seed)
        succ = torch.stack([torch.randperm(vocab, generator=self.gen)[:fanout] for _ in range(vocab)])
        weights = -torch.log(torch.rand(vocab, fanout, generator=self.gen))  # exponential -> Dirichlet(1)
        self.transition = torch.zeros(vocab, vocab).scatter_(1, succ, weights / weights.sum(1, keepdim=True))

    def batch(self, batch: int, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.empty(batch, seq + 1, dtype=torch.long)
        tokens[:, 0] = torch.randint(0, self.vocab, (batch,), generator=self.gen)
        for t in range(seq):
            tokens[:, t + 1] = torch.multinomial(self.transition[tokens[:, t]], 1, generator=self.gen).squeeze(1)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def entropy(self) -> float:
        """The chain's mean conditional entropy in nats (the loss floor, uniform start tokens)."""
        p = self.transition
        return float(-(p * torch.log(p.clamp_min(1e-30))).sum(1).mean())


class SparseMarkovData:
    """Token sequences of a fixed random Markov chain over ``vocab`` tokens, held as a successor
    table, so a vocabulary of real models (128256 tokens) costs ``vocab x fanout`` entries rather
    than a ``vocab x vocab`` matrix.

    Each token has ``fanout`` successors drawn uniformly (with repetition) and weights drawn from
    Dirichlet(1), so the best achievable next-token loss is at most ``ln(fanout)`` nats. Everything
    is drawn from a CPU ``torch.Generator`` seeded with ``seed``.

    ``batch(batch, seq)`` returns ``(inputs, targets)``, int64 ``[batch, seq]`` each on the CPU
    (targets are the inputs shifted by one); successive calls continue the generator.
    """

    def __init__(self, vocab: int, *, fanout: int = 4, seed: int = 0) -> None:
        if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 2:
            raise ValueError(f"vocab: expected an int >= 2, got {vocab!r}")
        if isinstance(fanout, bool) or not isinstance(fanout, int) or fanout < 1:
            raise ValueError(f"fanout: expected an int >= 1, got {fanout!r}")
        self.vocab = vocab
        self.gen = torch.Generator().manual_seed(seed)
        self.successors = torch.randint(0, vocab, (vocab, fanout), generator=self.gen)
        weights = -torch.log(torch.rand(vocab, fanout, generator=self.gen))  # exponential -> Dirichlet(1)
        self.weights = weights / weights.sum(1, keepdim=True)

    def batch(self, batch: int, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
        for name, value in (("batch", batch), ("seq", seq)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive int, got {value!r}")
        tokens = torch.empty(batch, seq + 1, dtype=torch.long)
        tokens[:, 0] = torch.randint(0, self.vocab, (batch,), generator=self.gen)
        for t in range(seq):
            prev = tokens[:, t]
            pick = torch.multinomial(self.weights[prev], 1, generator=self.gen)
            tokens[:, t + 1] = self.successors[prev].gather(1, pick).squeeze(1)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
