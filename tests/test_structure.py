"""The shape of the code: no import cycles, the algorithm registry, one list of activations, and
independent random streams."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import yaml

from rlexp.algos import ALGOS
from rlexp.algos.learner import Learner, OffPolicyLearner, OnPolicyLearner
from rlexp.algos.off_policy import OffPolicyConfig
from rlexp.algos.on_policy import OnPolicyConfig
from rlexp.nn import ACTIVATIONS
from rlexp.seeding import STREAMS, RankSeeds

from .conftest import ROOT, composed

PACKAGE = ROOT / "rlexp"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the rlexp modules it imports anywhere in its file (deferred imports included)."""
    files = [p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts]
    known = {module_name(p) for p in files}
    graph: dict[str, set[str]] = {}
    for path in files:
        name = module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                names = [base, *(f"{base}.{a.name}" for a in node.names)]
            else:
                continue
            for target in names:
                while target and target not in known:  # `from pkg import name`: the module pkg
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of two or more modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_inside_rlexp():
    graph = import_graph()
    assert len(graph) > 40 and "rlexp.algos.ppo.torch" in graph["rlexp.algos.ppo"]  # deferred imports count
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_algo_preset_has_its_registry_entry_and_learners():
    names = {
        p.stem: (yaml.safe_load(p.read_text()) or {}).get("name")
        for p in (ROOT / "conf" / "algo").glob("*.yaml")
    }
    presets = {stem for stem, name in names.items() if name == stem}  # an algorithm's own preset
    assert (
        sorted(presets)
        == sorted(ALGOS)
        == ["crossq", "ddpg", "dqn", "ppo", "sac", "td3", "tqc", "trpo", "vpg"]
    )
    # the other presets are variants of one (algo=rainbow: dqn with its extensions on; c51 and qrdqn: dqn
    # with a distributional head)
    assert {stem: rlexp_name(stem) for stem in names if stem not in presets} == {
        "c51": "dqn",
        "qrdqn": "dqn",
        "rainbow": "dqn",
    }
    for name, config in ALGOS.items():
        assert name == config.NAME
        family = OnPolicyLearner if issubclass(config, OnPolicyConfig) else OffPolicyLearner
        assert issubclass(config, (OnPolicyConfig, OffPolicyConfig))
        for backend in config.BACKENDS:
            learner = config.learner_class(backend)
            assert issubclass(learner, family) and issubclass(learner, Learner), (name, backend)
            assert learner.__module__ == f"rlexp.algos.{name}.{backend}"


def test_an_algorithm_whose_code_reads_its_epochs_declares_the_schedules_that_span_them():
    """A schedule over the run's length (read from algo.epochs: PPO's annealing, DQN's beta) makes a run
    that cannot be extended exactly; ``resume=`` refuses other epochs only for the settings an algorithm
    declares in RUN_SCHEDULES (issue 71: DQN's beta was not declared). Any algorithm whose package reads
    ``.epochs`` must declare at least one."""
    for name, config in ALGOS.items():
        package = ROOT / "rlexp" / "algos" / name
        reads = [
            f"{path.name}:{node.lineno}"
            for path in sorted(package.glob("*.py"))
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Attribute) and node.attr == "epochs" and isinstance(node.ctx, ast.Load)
        ]
        assert not reads or config.RUN_SCHEDULES, (
            f"{name} reads algo.epochs ({', '.join(reads)}) but declares no RUN_SCHEDULES"
        )


def rlexp_name(preset: str) -> str:
    """algo.name of the config that ``algo=<preset>`` composes."""
    return composed(f"algo={preset}").algo.name


def test_one_list_of_activations_implemented_alike_by_every_backend():
    import tensorflow as tf
    import torch

    from rlexp.nn import acting
    from rlexp.nn import tf as nn_tf
    from rlexp.nn import torch as nn_torch

    assert set(acting.ACTIVATIONS) == set(nn_torch.ACTIVATIONS) == set(nn_tf.ACTIVATIONS) == set(ACTIVATIONS)
    x = np.linspace(-3, 3, 13)
    for name in ACTIVATIONS:
        ref = acting.ACTIVATIONS[name](x)
        got_torch = nn_torch.ACTIVATIONS[name]()(torch.as_tensor(x)).numpy()
        got_tf = nn_tf.ACTIVATIONS[name](tf.constant(x)).numpy()
        np.testing.assert_allclose(got_torch, ref, rtol=1e-6, atol=1e-7, err_msg=name)
        np.testing.assert_allclose(got_tf, ref, rtol=1e-6, atol=1e-7, err_msg=name)


def test_random_streams_are_distinct_per_purpose_and_rank_and_reproducible():
    seeds = [RankSeeds(7, rank).as_dict() for rank in range(3)]
    values = [v for s in seeds for v in s.values()]
    assert list(seeds[0]) == list(STREAMS) and len(set(values)) == len(values)
    assert RankSeeds(7, 1).as_dict() == seeds[1]
    assert all(0 <= v < 2**63 for v in values)
    acting, replay = RankSeeds(7).generator("acting"), RankSeeds(7).generator("replay")
    assert acting.integers(0, 1000, 10).tolist() != replay.integers(0, 1000, 10).tolist()


@pytest.mark.parametrize("seed", [0, 2**64 + 5])
def test_any_non_negative_seed_gives_seeds_every_library_takes(seed):
    assert all(0 <= v < 2**63 for v in RankSeeds(seed, 3).as_dict().values())


def test_the_numpy_tanh_of_torch_networks_has_torchs_values_and_gradients():
    """TanhInPlace computes tanh with numpy on CPU float32 (much faster than torch's kernel there):
    within 2 ULP of torch's values, the same gradient formula, in place, and torch's own kernel for
    other dtypes."""
    import torch

    from rlexp.nn.torch import TanhInPlace

    x = torch.linspace(-6, 6, 4001, dtype=torch.float32).reshape(-1, 1).repeat(1, 3)
    want = torch.tanh(x)
    a = x.clone().requires_grad_(True)
    h = a * 1.0  # a non-leaf, as a Linear's output
    y = TanhInPlace()(h)
    assert y.data_ptr() == h.data_ptr()  # in place
    ulps = (y.detach().view(torch.int32) - want.view(torch.int32)).abs().max()
    assert int(ulps) <= 2
    g = torch.randn_like(x)
    y.backward(g)
    torch.testing.assert_close(a.grad, g * (1 - y.detach() ** 2))
    with torch.no_grad():
        z = TanhInPlace()(x.clone())
    torch.testing.assert_close(z, y.detach())
    x64 = x.double()
    assert torch.equal(TanhInPlace()(x64.clone()), torch.tanh(x64))  # float64: torch's tanh_


def test_the_onednn_linear_of_torch_networks_has_torchs_values_and_derivatives(monkeypatch):
    """Large products of rlexp's Linear go through oneDNN on the CPU (about twice torch's own speed on
    the AMD CPUs measured): the outputs, the gradients and the second derivatives that TRPO's
    Fisher-vector products take equal nn.functional.linear's to float32 rounding (sums of 150-300
    terms: within 1e-5 of each result's scale); small products and other dtypes take
    nn.functional.linear itself."""
    import torch

    from rlexp.nn import torch as tnn

    def close(a: torch.Tensor, b: torch.Tensor) -> None:
        assert float((a - b).detach().abs().max()) <= 1e-5 * float(b.detach().abs().max())

    real = tnn._ONEDNN_LINEAR
    assert real is not None  # the pinned torch has the kernel: the fast path is tested here
    calls = []
    monkeypatch.setattr(tnn, "_ONEDNN_LINEAR", lambda *args: calls.append(args[0].shape) or real(*args))
    monkeypatch.setattr(
        tnn, "ONEDNN_MIN_MACS", 6_000_000
    )  # the AMD EPYC's rule (a learner may have set another)
    torch.manual_seed(0)
    layer = tnn.Linear(300, 200)  # 150 rows x 300 x 200 = 9M multiply-adds: above ONEDNN_MIN_MACS
    x = torch.randn(150, 300, requires_grad=True)
    y = torch.tanh(layer(x))
    assert calls  # the oneDNN path was taken
    want = torch.tanh(torch.nn.functional.linear(x, layer.weight, layer.bias))
    close(y, want)
    v = torch.randn_like(y)
    got = torch.autograd.grad((y * v).sum(), [x, layer.weight, layer.bias], create_graph=True)
    ref = torch.autograd.grad((want * v).sum(), [x, layer.weight, layer.bias], create_graph=True)
    for a, b in zip(got, ref, strict=True):
        close(a, b)
    u = [torch.randn_like(g) for g in got]  # Hessian-vector products: derivatives of the gradients
    hvp = torch.autograd.grad(sum((g * w).sum() for g, w in zip(got, u, strict=True)), [x, layer.weight])
    hvp_ref = torch.autograd.grad(sum((g * w).sum() for g, w in zip(ref, u, strict=True)), [x, layer.weight])
    for a, b in zip(hvp, hvp_ref, strict=True):
        close(a, b)
    calls.clear()
    with torch.no_grad():
        close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
    assert calls  # without autograd: the kernel itself
    calls.clear()
    tnn.Linear(64, 64)(torch.randn(64, 64))  # 262k multiply-adds: torch's own product
    tnn.Linear(300, 200).double()(x.detach().double())  # float64: torch's own
    assert not calls
