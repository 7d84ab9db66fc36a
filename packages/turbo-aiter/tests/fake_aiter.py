"""A stand-in for the ``aiter`` module on the CPU: the functions turbo-aiter calls, with the
signatures of amd-aiter 0.1.7.post2.dev18, their preconditions (as aiter's C++ checks them) and
their documented semantics computed in float64. Every call is recorded (name, args).

Layout facts are implemented here independently of turbo_aiter (explicit index formulas, not
the adapter's reshapes), so a wrong translation in the adapter gives a wrong result.
"""

from __future__ import annotations

import torch

F64 = torch.float64


class FakeAiter:
    def __init__(self, fp8_dtype=torch.float8_e4m3fnuz, garbage: float = 777.0) -> None:
        self.calls: list[tuple[str, tuple]] = []
        self.fp8 = fp8_dtype
        self.garbage = garbage  # what "never written" rows hold

    # -- attention -----------------------------------------------------------------------------
    @staticmethod
    def _check_qkv(q, k, v):
        assert q.dtype in (torch.float16, torch.bfloat16), q.dtype
        assert k.dtype == q.dtype and v.dtype == q.dtype
        for t in (q, k, v):
            assert t.stride(-1) == 1, "aiter: contiguous last dim"
        assert q.shape[-1] % 8 == 0 and v.shape[-1] % 8 == 0, "aiter: head dims multiple of 8"
        assert q.shape[-1] <= 256 and v.shape[-1] <= 256
        assert q.shape[-2] % k.shape[-2] == 0

    @staticmethod
    def _allowed(s_q, s_kv, causal, left, right):
        # aiter: sides >= seqlen_k become -1; causal forces right = 0; bottom-right aligned.
        left = -1 if left >= s_kv else left
        right = -1 if right >= s_kv else right
        if causal:
            right = 0
        i = torch.arange(s_q).view(-1, 1)
        j = torch.arange(s_kv).view(1, -1)
        diag = i + s_kv - s_q
        ok = torch.ones(s_q, s_kv, dtype=torch.bool)
        if left >= 0:
            ok &= j >= diag - left
        if right >= 0:
            ok &= j <= diag + right
        return ok

    def _seq_fwd(self, q, k, v, scale, causal, left, right):
        """One sequence: q [s_q, h, d], k/v [s_kv, h_kv, d] float64 -> out [s_q, h, dv], lse [h, s_q]."""
        g = q.shape[1] // k.shape[1]
        kk, vv = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        s = torch.einsum("qhd,khd->hqk", q, kk) * scale
        ok = self._allowed(q.shape[0], k.shape[0], causal, left, right)
        s = s.masked_fill(~ok, float("-inf"))
        lse = torch.logsumexp(s, dim=-1)
        p = torch.where(torch.isfinite(lse)[..., None], torch.exp(s - lse[..., None]), torch.zeros_like(s))
        out = torch.einsum("hqk,khd->qhd", p, vv)
        return out, lse

    def mha_fwd(self, q, k, v, dropout_p, softmax_scale, is_causal, window_size_left, window_size_right,
                return_softmax_lse, return_dropout_randval, *rest):
        self.calls.append(("mha_fwd", (q, k, v, dropout_p, softmax_scale, is_causal, window_size_left,
                                       window_size_right, return_softmax_lse, return_dropout_randval, *rest)))
        self._check_qkv(q, k, v)
        assert q.dim() == 4 and dropout_p == 0.0 and return_softmax_lse and not return_dropout_randval
        outs, lses = [], []
        for b in range(q.shape[0]):
            o, lse = self._seq_fwd(q[b].to(F64), k[b].to(F64), v[b].to(F64), softmax_scale, is_causal,
                                   window_size_left, window_size_right)
            outs.append(o)
            lses.append(lse)
        return (torch.stack(outs).to(q.dtype), torch.stack(lses).float(), torch.empty(0),
                torch.empty(2, dtype=torch.int64))

    def _varlen(self, q, k, v, cu_q, cu_k, scale, causal, left, right, fn):
        assert cu_q.dtype == torch.int32 and cu_k.dtype == torch.int32
        cq, ck = cu_q.tolist(), cu_k.tolist()
        for b in range(len(cq) - 1):
            fn(slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1]))

    def mha_varlen_fwd(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, min_seqlen_q,
                       dropout_p, softmax_scale, logits_soft_cap, zero_tensors, is_causal, window_size_left,
                       window_size_right, return_softmax_lse, return_dropout_randval, *rest):
        self.calls.append(("mha_varlen_fwd", (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                              min_seqlen_q, dropout_p, softmax_scale, logits_soft_cap,
                                              zero_tensors, is_causal, window_size_left, window_size_right,
                                              return_softmax_lse, return_dropout_randval, *rest)))
        self._check_qkv(q, k, v)
        assert q.dim() == 3 and logits_soft_cap == 0.0 and return_softmax_lse
        out = torch.full((q.shape[0], q.shape[1], v.shape[-1]), self.garbage, dtype=q.dtype)
        lse = torch.full((q.shape[1], q.shape[0]), self.garbage, dtype=torch.float32)
        # aiter rewrites window sides against max_seqlen_k, not each sequence's length
        left = -1 if window_size_left >= max_seqlen_k else window_size_left
        right = -1 if window_size_right >= max_seqlen_k else window_size_right

        def one(sq, sk):
            o, lz = self._seq_fwd(q[sq].to(F64), k[sk].to(F64), v[sk].to(F64), softmax_scale, is_causal, left, right)
            out[sq] = o.to(q.dtype)
            lse[:, sq] = lz.float()
        self._varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, is_causal, left, right, one)
        return out, lse, torch.empty(0), torch.empty(2, dtype=torch.int64)

    def _seq_bwd(self, dout, q, k, v, scale, causal, left, right):
        q, k, v = (t.to(F64).requires_grad_(True) for t in (q, k, v))
        o, _ = self._seq_fwd(q, k, v, scale, causal, left, right)
        dq, dk, dv = torch.autograd.grad(o, (q, k, v), dout.to(F64))
        return dq, dk, dv

    def mha_bwd(self, dout, q, k, v, out, softmax_lse, dropout_p, softmax_scale, is_causal, window_size_left,
                window_size_right, deterministic, *rest):
        self.calls.append(("mha_bwd", (dout, q, k, v, out, softmax_lse, dropout_p, softmax_scale, is_causal,
                                       window_size_left, window_size_right, deterministic, *rest)))
        self._check_qkv(q, k, v)
        assert dout.shape == out.shape and out.shape[-1] == v.shape[-1] and dout.stride(-1) == 1
        assert softmax_lse.shape == (q.shape[0], q.shape[2], q.shape[1]) and softmax_lse.is_contiguous()
        grads = [self._seq_bwd(dout[b], q[b], k[b], v[b], softmax_scale, is_causal, window_size_left,
                               window_size_right) for b in range(q.shape[0])]
        dq, dk, dv = (torch.stack([g[i] for g in grads]) for i in range(3))
        return dq.to(q.dtype), dk.to(q.dtype), dv.to(q.dtype), torch.empty(0)

    def mha_varlen_bwd(self, dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                       max_seqlen_k, dropout_p, softmax_scale, zero_tensors, is_causal, window_size_left,
                       window_size_right, deterministic, *rest):
        self.calls.append(("mha_varlen_bwd", (dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k,
                                              max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, zero_tensors,
                                              is_causal, window_size_left, window_size_right, deterministic,
                                              *rest)))
        self._check_qkv(q, k, v)
        assert softmax_lse.shape == (q.shape[1], q.shape[0])
        dq = torch.full_like(q, self.garbage)
        dk = torch.full_like(k, self.garbage)
        dv = torch.full_like(v, self.garbage)
        left = -1 if window_size_left >= max_seqlen_k else window_size_left
        right = -1 if window_size_right >= max_seqlen_k else window_size_right

        def one(sq, sk):
            a, b, c = self._seq_bwd(dout[sq], q[sq], k[sk], v[sk], softmax_scale, is_causal, left, right)
            dq[sq], dk[sk], dv[sk] = a.to(q.dtype), b.to(q.dtype), c.to(q.dtype)
        self._varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, softmax_scale, is_causal, left, right, one)
        return dq, dk, dv, torch.empty(0)

    # -- FP8 GEMM ------------------------------------------------------------------------------
    def _check_a8w8(self, XQ, WQ, dtype):
        assert XQ.dtype == self.fp8 and WQ.dtype == self.fp8, (XQ.dtype, WQ.dtype)
        assert XQ.stride(-1) == 1 and WQ.stride(-1) == 1 and XQ.shape[1] == WQ.shape[1]
        assert dtype in (torch.bfloat16, torch.float16)

    def gemm_a8w8(self, XQ, WQ, x_scale, w_scale, bias=None, dtype=torch.bfloat16, splitK=None):
        self.calls.append(("gemm_a8w8", (XQ, WQ, x_scale, w_scale, bias, dtype)))
        self._check_a8w8(XQ, WQ, dtype)
        m, n = XQ.shape[0], WQ.shape[0]
        assert x_scale.shape == (m, 1) and w_scale.shape == (1, n) and x_scale.dtype == torch.float32
        y = (XQ.to(F64) * x_scale.to(F64)) @ (WQ.to(F64) * w_scale.to(F64).t()).t()
        return y.to(dtype)

    def gemm_a8w8_blockscale(self, XQ, WQ, x_scale, w_scale, dtype=torch.bfloat16, isBpreshuffled=False):
        self.calls.append(("gemm_a8w8_blockscale", (XQ, WQ, x_scale, w_scale, dtype)))
        self._check_a8w8(XQ, WQ, dtype)
        m, k = XQ.shape
        n = WQ.shape[0]
        assert x_scale.shape == (m, k // 128) and x_scale.is_contiguous()
        assert w_scale.shape == (-(-n // 128), k // 128) and w_scale.is_contiguous()
        kk = torch.arange(k) // 128
        xs = x_scale.to(F64)[:, kk]
        ws = w_scale.to(F64)[(torch.arange(n) // 128)[:, None], kk[None, :]]
        return ((XQ.to(F64) * xs) @ (WQ.to(F64) * ws).t()).to(dtype)

    # -- FP4 GEMM ------------------------------------------------------------------------------
    @staticmethod
    def unshuffle_weight(w: torch.Tensor) -> torch.Tensor:
        """Plain ``[N, K/2]`` bytes from the 16x16 preshuffled layout, element by element."""
        n, kb = w.shape
        flat = w.view(torch.uint8).reshape(-1)
        row = torch.arange(n)[:, None]
        c = torch.arange(kb)[None, :]
        nt, r = row // 16, row % 16
        kt, h, e = c // 32, (c % 32) // 16, c % 16
        return flat[(((nt * (kb // 32) + kt) * 2 + h) * 16 + r) * 16 + e]

    @staticmethod
    def unshuffle_scales(s: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
        rp, cp = s.shape
        assert rp % 256 == 0 and cp % 8 == 0
        flat = s.view(torch.uint8).reshape(-1)
        r = torch.arange(rows)[:, None]
        c = torch.arange(cols)[None, :]
        a, i1, i2 = r // 32, (r % 32) // 16, r % 16
        b, j1, j2 = c // 8, (c % 8) // 4, c % 4
        return flat[((((a * (cp // 8) + b) * 4 + j2) * 16 + i2) * 2 + j1) * 2 + i1]

    def gemm_a4w4(self, A, B, A_scale, B_scale, out, bias=None, alpha=1.0, beta=0.0, bpreshuffle=True):
        self.calls.append(("gemm_a4w4", (A, B, A_scale, B_scale, out, bias, alpha, beta, bpreshuffle)))
        from turbo_core.reference.gemm_fp8 import dequant_mx

        m, kb = A.shape
        n = B.shape[0]
        assert out.dtype == torch.bfloat16 and out.shape[0] % 32 == 0 and out.shape[0] >= m and out.shape[1] == n
        assert bpreshuffle and beta == 0.0 and alpha == 1.0
        b_plain = self.unshuffle_weight(B).view(A.dtype)
        sa = self.unshuffle_scales(A_scale, m, kb * 2 // 32)
        sb = self.unshuffle_scales(B_scale, n, kb * 2 // 32)
        a64 = dequant_mx(A, sa, F64, packed=True)
        b64 = dequant_mx(b_plain, sb, F64, packed=True)
        out.fill_(self.garbage)
        out[:m] = (a64 @ b64.t()).to(out.dtype)
        return out

    # -- RMSNorm -------------------------------------------------------------------------------
    def rmsnorm2d_fwd(self, input, weight, epsilon, use_model_sensitive_rmsnorm=0):
        self.calls.append(("rmsnorm2d_fwd", (input, weight, epsilon, use_model_sensitive_rmsnorm)))
        assert input.dtype in (torch.float16, torch.bfloat16) and weight.dtype == input.dtype
        assert weight.shape == (input.shape[1],)
        x = input.to(F64)
        r = torch.rsqrt(x.square().mean(dim=1, keepdim=True) + epsilon)
        return (x * r * weight.to(F64)).to(input.dtype)
