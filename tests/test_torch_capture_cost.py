"""The training-step capture computes nothing: PyTorch's joint trace sees fake tensors only.

``aot_export_module(trace_joint=True)`` re-traces its joint graph with ``make_fx`` in real mode on the
arguments it is given; with the user's real tensors that ran a whole forward and backward pass of the
model (for ResNet-50 at batch 32, most of the capture's CPU). aoe hands it fake copies instead.
"""
from __future__ import annotations

import pytest

from conftest import import_extra

pytestmark = pytest.mark.extra("torch")
torch = import_extra("torch", "torch")

import torch._functorch.aot_autograd as aot_autograd  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensor  # noqa: E402

import aoe.torch  # noqa: E402


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).mean((2, 3)))


def _record_retrace(monkeypatch) -> list[bool]:
    """Per joint re-trace (make_fx inside aot_autograd): whether it computes nothing, i.e. its tensor
    arguments are fake or a fake mode is active (the module's real parameters are then faked as read)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    seen: list[bool] = []
    real = aot_autograd.make_fx

    def recording(fn, *a, **k):
        traced = real(fn, *a, **k)

        def run(*args):
            fake_mode = any(isinstance(m, FakeTensorMode) for m in _get_current_dispatch_mode_stack())
            seen.append(fake_mode or all(isinstance(t, FakeTensor) for t in args if isinstance(t, torch.Tensor)))
            return traced(*args)

        return run

    monkeypatch.setattr(aot_autograd, "make_fx", recording)
    return seen


def test_train_step_capture_traces_fake_tensors_only(monkeypatch):
    seen = _record_retrace(monkeypatch)
    model = _Net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    g = aoe.torch.capture_train_step(model, (torch.randn(4, 3, 16, 16),), name="net")
    assert seen and all(seen), seen  # real tensors here = a real forward + backward
    assert any(o.type.startswith("Conv2DBackprop") for o in g.ops)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # running stats untouched


def test_fake_inputs_of_the_callers_own_mode_are_used_as_they_are():
    from torch._subclasses.fake_tensor import FakeTensorMode

    model = _Net()
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        x = mode.from_tensor(torch.randn(2, 3, 16, 16))
        g = aoe.torch.capture_train_step(model, (x,), name="net")
    assert any(o.type.startswith("Conv2DBackprop") for o in g.ops)
    assert (2, 3, 16, 16) in {t.shape for t in g.tensors.values()}
