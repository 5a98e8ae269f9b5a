"""PyTorch's own OpInfo samples run on the nkipy device through PyTorch's
device-type test framework (torch.testing._internal.common_device_type):
@ops over the OpInfos of the ops the eager fallback serves directly
(spike_torch._generic.SERVED_OPS: add, mul, exp, mm, softmax, layer norm, ...),
instantiated by instantiate_device_type_tests(..., only_for="privateuse1"): the
generated class is TestNkipyOpInfoPRIVATEUSE1, its tests test_*_nkipy_<dtype>
(PrivateUse1TestBase sets device_type to "nkipy" only in setUpClass, after the
class is named). Each sample runs on the device twice (the second call from
the C++ call cache, spike_torch/csrc/eager.cpp) and both results are
compared with the same op on CPU. float32: rtol 1e-4, atol 1e-5; float16:
rtol/atol 1e-2; bfloat16: rtol/atol 2e-2. Backward (float32) for a subset.
"""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("expecttest")  # torch.testing._internal needs it

from opinfo_helpers import import_framework, to_device  # noqa: E402

common_device_type, common_utils, op_db = import_framework()
ops = common_device_type.ops
OpDTypes = common_device_type.OpDTypes

# (OpInfo name, variant_test_name) of the ops behind _generic.SERVED_OPS (binary
# and unary elementwise, reductions, mm/bmm/addmm, softmax, layer_norm; relu,
# which PyTorch runs as clamp_min).
NATIVE = {
    ("abs", ""), ("add", ""), ("sub", ""), ("mul", ""), ("div", "no_rounding_mode"),
    ("maximum", ""), ("minimum", ""), ("neg", ""), ("exp", ""), ("log", ""), ("sqrt", ""),
    ("rsqrt", ""), ("tanh", ""), ("sigmoid", ""), ("nn.functional.relu", ""), ("sin", ""),
    ("cos", ""), ("sum", ""), ("mean", ""), ("amax", ""), ("mm", ""), ("bmm", ""),
    ("softmax", ""), ("nn.functional.layer_norm", ""), ("addmm", ""),
}
BACKWARD = {"mul", "exp", "tanh", "sum", "mm", "softmax", "sigmoid", "nn.functional.layer_norm"}

NATIVE_OPS = [o for o in op_db if (o.name, o.variant_test_name) in NATIVE]
BACKWARD_OPS = [o for o in NATIVE_OPS if o.name in BACKWARD and not o.variant_test_name]
TOL = {torch.float32: (1e-4, 1e-5), torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)}


def test_all_native_ops_found():
    assert len(NATIVE_OPS) == len(NATIVE)
    assert len(BACKWARD_OPS) == len(BACKWARD)


class TestNkipyOpInfo(common_utils.TestCase):
    @ops(NATIVE_OPS, allowed_dtypes=(torch.float32, torch.float16, torch.bfloat16))
    def test_opinfo_samples(self, device, dtype, op):
        import spike_torch

        self.assertEqual(torch.device(device).type, "nkipy")
        rtol, atol = TOL[dtype]
        before = spike_torch.op_stats()
        n = 0
        for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
            expected = op(sample.input, *sample.args, **sample.kwargs)
            args = (to_device(sample.input, device), *to_device(sample.args, device))
            kwargs = to_device(sample.kwargs, device)
            for _ in range(2):      # the second call runs from the C++ call cache
                got = op(*args, **kwargs)
                self.assertEqual(got.device.type, "nkipy")
                torch.testing.assert_close(got.cpu(), expected, rtol=rtol, atol=atol,
                                           equal_nan=True, msg=lambda m: f"{sample}: {m}")
            n += 1
        self.assertGreater(n, 0)
        after = spike_torch.op_stats()
        self.assertGreater(after["device_calls"], before["device_calls"],
                           "no sample ran on the device")
        self.assertGreater(after["fast_calls"], before["fast_calls"],
                           "no sample ran from the C++ call cache")

    @ops(BACKWARD_OPS, dtypes=OpDTypes.supported_backward, allowed_dtypes=(torch.float32,))
    def test_opinfo_backward(self, device, dtype, op):
        n = 0
        for sample in list(op.sample_inputs("cpu", dtype, requires_grad=True))[:3]:
            if not isinstance(sample.input, torch.Tensor) or sample.input.numel() == 0:
                continue
            expected = op(sample.input, *sample.args, **sample.kwargs)
            expected.sum().backward()
            x = sample.input.detach().to(device).requires_grad_()
            got = op(x, *to_device(sample.args, device), **to_device(sample.kwargs, device))
            got.sum().backward()
            torch.testing.assert_close(x.grad.cpu(), sample.input.grad, rtol=1e-4, atol=1e-5)
            n += 1
        self.assertGreater(n, 0)


common_device_type.instantiate_device_type_tests(TestNkipyOpInfo, globals(),
                                                 only_for="privateuse1")
