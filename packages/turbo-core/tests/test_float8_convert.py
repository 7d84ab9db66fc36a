"""``convert_to_float8``: which layers a tiny model gets converted (the default dims rule, a filter
that replaces it, subclasses left alone), the recipe of each layer (``config_fn``, its ``None``),
the converted model computing exactly what layers converted one by one compute, parameters and
optimizer state kept, and the argument errors."""

import copy

import pytest
import torch

from turbo_core import Float8QuantConfig
from turbo_core.modules import Float8Linear, Linear, convert_to_float8, dims_fit_fp8

ROWWISE = Float8QuantConfig(granularity="ROWWISE")
BLOCKWISE = Float8QuantConfig(granularity="BLOCKWISE", block_size=32)


class Tiny(torch.nn.Module):
    """A decoder-shaped toy: 16-multiple projections, a 4-expert router and a 10-word head (not
    16-multiples), turbo's Linear, and torch's MultiheadAttention (whose out_proj is a subclass)."""

    def __init__(self):
        super().__init__()
        self.attn = torch.nn.ModuleDict({"q": torch.nn.Linear(32, 32), "o": torch.nn.Linear(32, 32, bias=False)})
        self.mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), Linear(64, 32))
        self.router = torch.nn.Linear(32, 4)
        self.head = torch.nn.Linear(32, 10)
        self.mha = torch.nn.MultiheadAttention(32, 2, batch_first=True)
        for p in self.parameters():  # Gaussian weights and biases, as the other FP8 module tests use
            torch.nn.init.normal_(p, std=0.15)

    def forward(self, x):
        h = self.attn["o"](torch.relu(self.attn["q"](x)))
        h = h + self.mlp(h) + self.mha(h, h, h, need_weights=False)[0]
        return self.head(h), self.router(h)


def _converted(model):
    return {fqn: m.config for fqn, m in model.named_modules() if isinstance(m, Float8Linear)}


def _by_hand(model, configs):
    """A copy of ``model`` (taken before conversion) with the layers ``configs`` names converted one by
    one through ``Float8Linear.from_float``."""
    for fqn, cfg in configs.items():
        Float8Linear.from_float(model.get_submodule(fqn), config=cfg)
    return model


def _assert_same_step(model, twin):
    """Forward and backward of both models on one input: outputs and every gradient bit for bit
    (each layer's own numerics against float64 are ``Float8Linear``'s tests)."""
    x = torch.randn(3, 4, 32)
    got, want = model(x), twin(x)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    (got[0].sum() + got[1].sum()).backward()
    (want[0].sum() + want[1].sum()).backward()
    for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad), name


def test_default_converts_layers_whose_dims_are_multiples_of_16():
    torch.manual_seed(0)
    model = Tiny()
    twin = copy.deepcopy(model)
    plain = copy.deepcopy(model)
    params = {name: p for name, p in model.named_parameters()}
    state = {k: v.clone() for k, v in model.state_dict().items()}
    assert convert_to_float8(model) is model
    default = Float8QuantConfig()
    want = {"attn.q": default, "attn.o": default, "mlp.0": default, "mlp.2": default}
    assert _converted(model) == want
    assert type(model.router) is torch.nn.Linear and type(model.head) is torch.nn.Linear
    assert type(model.mha.out_proj) is torch.nn.modules.linear.NonDynamicallyQuantizableLinear
    assert all(p is params[name] for name, p in model.named_parameters())  # the same tensors
    assert set(model.state_dict()) == set(state)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    _assert_same_step(model, _by_hand(twin, want))
    x = torch.randn(2, 32)
    assert not torch.equal(model(x)[0], plain(x)[0])  # the FP8 layers do run in FP8


def test_recipe_per_layer_matches_layers_converted_one_by_one():
    torch.manual_seed(1)
    model = Tiny()
    twin = copy.deepcopy(model)

    def recipe(layer, fqn):
        if fqn.startswith("mlp."):
            return ROWWISE
        return BLOCKWISE if fqn == "attn.o" else None  # None: the model-wide config

    hybrid = Float8QuantConfig(format="HYBRID")
    convert_to_float8(model, hybrid, config_fn=recipe)
    want = {"attn.q": hybrid, "attn.o": BLOCKWISE, "mlp.0": ROWWISE, "mlp.2": ROWWISE}
    assert _converted(model) == want
    _assert_same_step(model, _by_hand(twin, want))


def test_a_filter_replaces_the_default_rule():
    torch.manual_seed(2)
    model = Tiny()
    seen = []

    def keep(layer, fqn):
        seen.append(fqn)
        return fqn != "mlp.0"

    convert_to_float8(model, ROWWISE, module_filter_fn=keep)
    # every exact Linear is offered; the router and head (dims not multiples of 16) convert too
    assert sorted(seen) == ["attn.o", "attn.q", "head", "mlp.0", "mlp.2", "router"]
    assert set(_converted(model)) == {"attn.q", "attn.o", "mlp.2", "router", "head"}
    out, logits = model(torch.randn(2, 32))
    assert out.shape == (2, 10) and logits.shape == (2, 4)
    both = Tiny()
    convert_to_float8(both, module_filter_fn=lambda m, fqn: dims_fit_fp8(m) and fqn != "attn.q")
    assert set(_converted(both)) == {"attn.o", "mlp.0", "mlp.2"}


def test_layers_keep_their_optimizer_state_and_converted_layers_stay():
    torch.manual_seed(3)
    model = Tiny()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model(torch.randn(2, 32))[0].sum().backward()
    opt.step()
    convert_to_float8(model, ROWWISE)
    opt.zero_grad()
    model(torch.randn(2, 32))[0].sum().backward()
    before = model.mlp[0].weight.detach().clone()
    opt.step()  # the optimizer's parameters are the converted layers' parameters
    assert not torch.equal(before, model.mlp[0].weight)
    convert_to_float8(model, BLOCKWISE)  # already Float8Linear: left as they are
    configs = list(_converted(model).values())
    assert configs and all(c == ROWWISE for c in configs)


def test_a_linear_root_is_converted():
    lin = torch.nn.Linear(32, 16)
    assert convert_to_float8(lin, ROWWISE) is lin and type(lin) is Float8Linear and lin.config == ROWWISE
    odd = torch.nn.Linear(30, 16)
    assert type(convert_to_float8(odd)) is torch.nn.Linear


def test_argument_errors():
    model = Tiny()
    with pytest.raises(TypeError, match=r"^model: expected a torch.nn.Module, got dict"):
        convert_to_float8({})
    with pytest.raises(TypeError, match=r"^config: expected a Float8QuantConfig"):
        convert_to_float8(model, "ROWWISE")
    with pytest.raises(TypeError, match=r"^module_filter_fn: expected a callable"):
        convert_to_float8(model, module_filter_fn=True)
    with pytest.raises(TypeError, match=r"^config_fn: expected a callable"):
        convert_to_float8(model, config_fn=ROWWISE)
    with pytest.raises(TypeError, match=r"^module_filter_fn: expected a bool for 'attn.q', got int"):
        convert_to_float8(model, module_filter_fn=lambda m, fqn: 1)
    assert _converted(model) == {}  # nothing converted by the calls that failed
    with pytest.raises(TypeError, match=r"^config_fn: expected a Float8QuantConfig or None for 'attn.q', got str"):
        convert_to_float8(model, config_fn=lambda m, fqn: "ROWWISE")
