"""DeepEP's performance ``Config``: the fields and size hints of ``deep_ep.Config``.

turbo's :class:`~turbo_deepep.deep_ep.Buffer` moves rows with turbo's all-to-all, which has no chunked
staging buffers, so a ``Config`` changes nothing in how it runs. It is checked and kept so that
code sizing DeepEP buffers from it (``get_nvl_buffer_size_hint`` / ``get_rdma_buffer_size_hint``)
and passing it to ``dispatch`` / ``combine`` runs unchanged.
"""

from __future__ import annotations

from turbo_core.dispatch.specs.validate import require_int

__all__ = ["NUM_MAX_NVL_PEERS", "Config"]

#: Ranks per NVLink domain in DeepEP's layout; larger groups count ``W / 8`` RDMA ranks.
NUM_MAX_NVL_PEERS = 8
_MAX_TOPK = 128  # DeepEP's per-token metadata room: top-k ids and weights, FP8 scales
_MAX_SCALES = 128
_META_BYTES = 8  # a source-token record
_ROW_META = _META_BYTES + _MAX_TOPK * (8 + 4) + _MAX_SCALES * 4


def _round128(n: int) -> int:
    return (n + 127) // 128 * 128


class Config:
    """``Config(num_sms=20, num_max_nvl_chunked_send_tokens=6, num_max_nvl_chunked_recv_tokens=256,
    num_max_rdma_chunked_send_tokens=6, num_max_rdma_chunked_recv_tokens=256)``: DeepEP's arguments
    and rules (send chunks smaller than receive chunks; the RDMA receive chunk rounded up to a
    multiple of the send chunk, which must be at most half of it)."""

    def __init__(self, num_sms: int = 20, num_max_nvl_chunked_send_tokens: int = 6,
                 num_max_nvl_chunked_recv_tokens: int = 256, num_max_rdma_chunked_send_tokens: int = 6,
                 num_max_rdma_chunked_recv_tokens: int = 256) -> None:
        self.num_sms = require_int("num_sms", num_sms, minimum=0)
        nvl_send = require_int("num_max_nvl_chunked_send_tokens", num_max_nvl_chunked_send_tokens, minimum=1)
        nvl_recv = require_int("num_max_nvl_chunked_recv_tokens", num_max_nvl_chunked_recv_tokens, minimum=1)
        if nvl_send >= nvl_recv:
            raise ValueError(f"num_max_nvl_chunked_send_tokens: expected fewer than num_max_nvl_chunked_recv_tokens"
                             f" ({nvl_recv}), got {nvl_send}")
        rdma_send = require_int("num_max_rdma_chunked_send_tokens", num_max_rdma_chunked_send_tokens, minimum=1)
        rdma_recv = require_int("num_max_rdma_chunked_recv_tokens", num_max_rdma_chunked_recv_tokens, minimum=1)
        rdma_recv = -(-rdma_recv // rdma_send) * rdma_send
        if rdma_send > rdma_recv // 2:
            raise ValueError(f"num_max_rdma_chunked_send_tokens: expected at most half of"
                             f" num_max_rdma_chunked_recv_tokens ({rdma_recv}, rounded up to a multiple of the"
                             f" send chunk), got {rdma_send}")
        self.num_max_nvl_chunked_send_tokens = nvl_send
        self.num_max_nvl_chunked_recv_tokens = nvl_recv
        self.num_max_rdma_chunked_send_tokens = rdma_send
        self.num_max_rdma_chunked_recv_tokens = rdma_recv

    def _channels(self) -> int:
        return max(self.num_sms // 2, 1)

    def get_nvl_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        """Bytes of DeepEP-style NVLink staging for these chunk sizes: channels (``num_sms / 2``) x
        NVLink peers x receive-chunk tokens x (``hidden_bytes`` + room for 128 top-k ids, weights
        and scales), rounded up to 128. A hint only: turbo's Buffer allocates no staging memory."""
        hidden = require_int("hidden_bytes", hidden_bytes, minimum=0)
        ranks = require_int("num_ranks", num_ranks, minimum=1)
        peers = min(ranks, NUM_MAX_NVL_PEERS)
        return _round128(self._channels() * peers * self.num_max_nvl_chunked_recv_tokens * (hidden + _ROW_META))

    def get_rdma_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        """0 within one NVLink domain (``num_ranks <= 8``); otherwise the same count over the
        ``num_ranks / 8`` RDMA ranks with the RDMA receive chunk, doubled (send and receive halves)."""
        hidden = require_int("hidden_bytes", hidden_bytes, minimum=0)
        ranks = require_int("num_ranks", num_ranks, minimum=1)
        if ranks <= NUM_MAX_NVL_PEERS:
            return 0
        rdma_ranks = -(-ranks // NUM_MAX_NVL_PEERS)
        return _round128(2 * self._channels() * rdma_ranks * self.num_max_rdma_chunked_recv_tokens
                         * (hidden + _ROW_META))

    def __repr__(self) -> str:
        return (f"Config(num_sms={self.num_sms}, num_max_nvl_chunked_send_tokens="
                f"{self.num_max_nvl_chunked_send_tokens}, num_max_nvl_chunked_recv_tokens="
                f"{self.num_max_nvl_chunked_recv_tokens}, num_max_rdma_chunked_send_tokens="
                f"{self.num_max_rdma_chunked_send_tokens}, num_max_rdma_chunked_recv_tokens="
                f"{self.num_max_rdma_chunked_recv_tokens})")
