"""An independent writer (only struct and json) of a safetensors file laid out
as PyTorch saves an nn.Sequential(Linear(4, 3), ReLU(), Linear(3, 2)):
0-based child names ("0.weight", "2.bias"), the first layer in F64 (as a
float64 model or NumPy would write it), the second in F32, plus "wide", an
F64 tensor of values f32 cannot hold exactly or at all. For
tests/lua/test_interop.lua, which computes the same values.

    python3 tests/python/write_safetensors_torch.py FILE
"""
import sys

from write_safetensors import write


def ramp(n, scale, shift):
    return [i * scale + shift for i in range(n)]


TENSORS = [  # name, dtype, struct code, shape, values
    ("0.weight", "F64", "d", [3, 4], ramp(12, 1 / 7, -0.75)),
    ("0.bias", "F64", "d", [3], ramp(3, 0.1, -0.1)),
    ("2.weight", "F32", "f", [2, 3], ramp(6, -0.25, 0.5)),
    ("2.bias", "F32", "f", [2], [0.125, -0.375]),
    ("wide", "F64", "d", [6], [1e300, -1e300, 1e-50, float("nan"), 0.1, 3.4028235677973366e38]),
]

write(sys.argv[1], TENSORS, {"format": "pt"})
