"""apply's region matching: a region signature recorded by capture found in make_fx's trace of
a two-layer model (each layer with its own weights), swapped for one call, outputs kept."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn as nn

from forge_tui.model.apply_graph import calls, trace
from forge_tui.model.apply_kernels import REGION, Kernel
from forge_tui.model.apply_match import find_instances, replace_ops, replace_regions
from forge_tui.model.capture.graph import record_graph
from forge_tui.model.capture.regions import kernels_of, partition, signature


class Layer(nn.Module):
    """linear, then the region ``tanh(y * g) + b`` (three kernels, two weights of its own)."""

    def __init__(self, dim: int, k: int):
        super().__init__()
        self.lin = nn.Linear(dim, dim, bias=False)
        self.g = nn.Parameter(torch.full((dim,), 0.5 + k))
        self.b = nn.Parameter(torch.full((dim,), -1.0 - k))

    def forward(self, x, leak: bool = False):
        y = self.lin(x)
        t = torch.tanh(y * self.g)
        out = t + self.b
        return out + t if leak else out  # leak: the region's inner value is read outside


class TwoLayers(nn.Module):
    def __init__(self, dim: int = 16, leak: bool = False):
        super().__init__()
        self.layers = nn.ModuleList(Layer(dim, k) for k in range(2))
        self.leak = leak

    def forward(self, x):
        x = self.layers[0](x)
        return self.layers[1](x, leak=self.leak)


def _model(dim=16, leak=False, rows=4):
    torch.manual_seed(0)
    return TwoLayers(dim, leak).eval(), [torch.randn(rows, dim)]


def _signature(model, inputs) -> list:
    """The signature capture records for the model's last fusion region (a layer's)."""

    def run(mode):
        with torch.no_grad(), mode:
            return model(*inputs)

    graph = record_graph(model, inputs, run)
    regions = [i for i in partition(graph) if kernels_of(graph, i) >= 2]
    return json.loads(signature(graph, regions[-1]))


def _region_body(x, g, b):
    return torch.tanh(x * g) + b


def _kernel(sig: list, target=_region_body) -> Kernel:
    cap = {"kind": REGION, "region": "R1", "inputs": [{}], "params": [{"name": "g"}, {"name": "b"}], "signature": sig}
    return Kernel(Path("k"), {"capture": cap}, REGION, "R1", json.dumps(sig), target, param_order=[0, 1])


def test_both_layers_are_found_each_with_its_own_weights():
    model, inputs = _model()
    sig = _signature(model, inputs)
    traced = trace(model, inputs, "two layers")
    found, skipped = find_instances(calls(traced.gm), sig, set())
    assert len(found) == 2 and not skipped
    names = [[traced.weights[str(inst.weights[j].target)] for j in sorted(inst.weights)] for inst in found]
    assert names == [["layers.0.g", "layers.0.b"], ["layers.1.g", "layers.1.b"]]
    assert all(inst.inputs[0].target == torch.ops.aten.mm.default for inst in found)  # the linear's output


def test_replacing_both_keeps_the_output_and_drops_the_calls():
    model, inputs = _model()
    sig = _signature(model, inputs)
    traced = trace(model, inputs, "two layers")
    seen = []

    def kernel(x, g, b):
        seen.append((float(g[0]), float(b[0])))  # each call gets its own layer's weights
        return _region_body(x, g, b)

    k = _kernel(sig, kernel)
    replace_regions(traced.gm, [k], traced.weights)
    assert k.replaced == 2 and k.instances == [["layers.0.g", "layers.0.b"], ["layers.1.g", "layers.1.b"]]
    left = {str(c.node.target) for c in calls(traced.gm)}
    assert "aten.tanh.default" not in left and "aten.mm.default" in left
    with torch.no_grad():
        want = model(*inputs)
        (got,) = traced.gm(*inputs)
    torch.testing.assert_close(got, want)
    assert seen == [(0.5, -1.0), (1.5, -2.0)]


def test_an_instance_whose_inner_value_is_read_outside_is_skipped():
    model, inputs = _model()
    sig = _signature(model, inputs)
    leaky, _ = _model(leak=True)
    traced = trace(leaky, inputs, "leaky")
    found, skipped = find_instances(calls(traced.gm), sig, set())
    assert len(found) == 1 and len(skipped) == 1 and "read outside the region" in skipped[0]


def test_other_shapes_do_not_match():
    model, inputs = _model()
    sig = _signature(model, inputs)
    wide, wide_in = _model(dim=32)
    assert find_instances(calls(trace(wide, wide_in, "wide").gm), sig, set())[0] == []
    tall, tall_in = _model(rows=8)
    assert find_instances(calls(trace(tall, tall_in, "tall").gm), sig, set())[0] == []


def test_an_op_kernel_replaces_calls_and_writes_back_in_place():
    from forge_tui.model.apply_kernels import OP
    from forge_tui.model.capture.describe import call_key, describe

    class InPlace(nn.Module):
        def forward(self, x):
            y = x * 2
            torch.relu_(y)
            return y + 1

    x = torch.randn(4, 8)
    traced = trace(InPlace(), [x], "in place")
    key = call_key("aten.relu_.default", describe([x]), {})
    k = Kernel(Path("k"), {"capture": {}}, OP, "aten.relu_.default", key, lambda t: t.clamp_min(0))
    assert replace_ops(traced.gm, [k]) == {} and k.replaced == 1
    (got,) = traced.gm(x)
    torch.testing.assert_close(got, torch.relu(x * 2) + 1)


def test_values_read_on_the_host_are_burnt_in_and_their_reads_go():
    """A branch on ``.item()`` traces as the forward took it; the read (a host sync that no
    CUDA graph can capture) and the calls that only fed it leave the graph."""

    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = Layer(16, 0)

        def forward(self, x):
            if bool((x > 100).any()):  # never true here: the graph keeps the other path
                x = x * 0
            return self.layer(x)

    model, inputs = Branchy().eval(), [torch.randn(4, 16)]
    sig = _signature(model, inputs)
    traced = trace(model, inputs, "branchy")
    k = _kernel(sig)
    replace_regions(traced.gm, [k], traced.weights)
    left = [str(c.node.target) for c in calls(traced.gm)]
    assert k.replaced == 1 and "aten.tanh.default" not in left
    assert "aten._local_scalar_dense.default" not in left and "aten.any.default" not in left
    with torch.no_grad():
        torch.testing.assert_close(traced.gm(*inputs)[0], model(*inputs))


def test_an_instance_reading_another_swapped_instance_reads_its_call():
    """Two instances in a row (the first's output is also returned, so capture keeps them
    apart): the second's input is the first's operator call, not the erased calls."""

    class Chain(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = Layer(16, 0), Layer(16, 1)

        def forward(self, x):
            y = torch.tanh(x * self.a.g) + self.a.b
            z = torch.tanh(y * self.b.g) + self.b.b
            return z, y

    model, inputs = Chain().eval(), [torch.randn(4, 16)]
    sig = _signature(model, inputs)
    traced = trace(model, inputs, "chain")
    k = _kernel(sig)
    replace_regions(traced.gm, [k], traced.weights)
    traced.gm.graph.lint()
    assert k.replaced == 2
    with torch.no_grad():
        for got, want in zip(traced.gm(*inputs), model(*inputs)):
            torch.testing.assert_close(got, want)


def test_chained_op_swaps_read_the_earlier_swap():
    from forge_tui.model.apply_kernels import OP
    from forge_tui.model.capture.describe import call_key, describe

    class Twice(nn.Module):
        def forward(self, x):
            return torch.relu(torch.relu(x - 1) - 1)

    x = torch.randn(4, 8)
    traced = trace(Twice(), [x], "twice")
    key = call_key("aten.relu.default", describe([x]), {})
    k = Kernel(Path("k"), {"capture": {}}, OP, "aten.relu.default", key, lambda t: t.clamp_min(0))
    replace_ops(traced.gm, [k])
    traced.gm.graph.lint()
    assert k.replaced == 2
    torch.testing.assert_close(traced.gm(x)[0], torch.relu(torch.relu(x - 1) - 1))


class Transposed(nn.Module):
    """linear, view + transpose (no copy), the region ``tanh(y * g) + b`` on the transposed view
    (its output keeps the transposed layout), then a view that relies on that layout."""

    def __init__(self, dim: int = 16):
        super().__init__()
        self.lin = nn.Linear(dim, dim, bias=False)
        self.g = nn.Parameter(torch.full((4,), 0.5))
        self.b = nn.Parameter(torch.full((4,), -1.0))

    def forward(self, x):  # x (2, 8, 16): view (2, 8, 4, 4), transpose -> (2, 4, 8, 4)
        y = self.lin(x).view(2, 8, 4, 4).transpose(1, 2)
        out = torch.tanh(y * self.g) + self.b
        return out.transpose(1, 2).view(2, 8, 16)  # a view only because out kept y's layout


def test_a_kernel_output_takes_the_models_strides():
    """A contiguous kernel output is copied into the layout the model's calls returned, so the
    traced graph's later views still hold (the rotary region of a Llama decoder)."""
    torch.manual_seed(0)
    model, inputs = Transposed().eval(), [torch.randn(2, 8, 16)]
    with torch.no_grad():
        want = model(*inputs)
    sig = _signature(model, inputs)
    traced = trace(model, inputs, "transposed")
    k = _kernel(sig, target=lambda x, g, b: _region_body(x.view(2, 8, 4, 4).transpose(1, 2), g, b).contiguous())
    replace_regions(traced.gm, [k], traced.weights)
    assert k.replaced == 1 and k.restrided == 1
    with torch.no_grad():
        (got,) = traced.gm(*inputs)
    torch.testing.assert_close(got, want)


def test_a_bf16_forward_is_judged_against_the_model_in_fp32():
    """Beyond one op's tolerance of eager bf16 but no worse than eager against fp32: passes;
    clearly worse: fails, with both errors in the note."""
    from forge_tui.model.apply_report import precision_check

    torch.manual_seed(0)
    ref32 = torch.randn(4096)
    eager = (ref32 + 0.02 * torch.randn(4096)).bfloat16()  # eager's own rounding drift
    near = (ref32 + 0.02 * torch.randn(4096)).bfloat16()  # as far from fp32, elsewhere
    far = (ref32 + 0.2 * torch.randn(4096)).bfloat16()
    first = {"passed": False, "note": "n of 4096 out of tolerance", "tolerance": "bfloat16: ...", "max_abs_err": 0.1}
    ok = precision_check([eager], [near], [ref32], first)
    assert ok["passed"] and "within 2x of eager's own" in ok["note"] and len(ok["precision"]) == 1
    bad = precision_check([eager], [far], [ref32], first)
    assert not bad["passed"] and "more than 2x eager's own" in bad["note"]


def test_an_fp32_forward_is_judged_against_the_model_in_fp64():
    """An fp32 forward on the GPU runs its convolutions in TF32: one rounding's difference
    upstream moves them by ~1e-3, far past fp32's op tolerance. Judged against fp64 next to
    eager's own error (H200, session 7: a UNet stage with a GroupNorm+SiLU kernel)."""
    from forge_tui.model.apply_report import precision_check

    torch.manual_seed(0)
    ref64 = torch.randn(4096, dtype=torch.float64)
    eager = (ref64 + 1e-3 * torch.randn(4096, dtype=torch.float64)).float()  # TF32-sized drift
    near = (ref64 + 1e-3 * torch.randn(4096, dtype=torch.float64)).float()
    far = (ref64 + 1e-2 * torch.randn(4096, dtype=torch.float64)).float()
    first = {"passed": False, "note": "n of 4096 out of tolerance", "tolerance": "float32: ...", "max_abs_err": 4e-3}
    ok = precision_check([eager], [near], [ref64], first, "fp64")
    assert ok["passed"] and "against the model in fp64 its error" in ok["note"]
    assert ok["tolerance"].endswith("then against the model in fp64: within 2x of eager's own error")
    assert not precision_check([eager], [far], [ref64], first, "fp64")["passed"]
