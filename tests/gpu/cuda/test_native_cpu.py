"""The compiled operator ``explorer::sparse_call`` (:mod:`explorer.gpu.cuda.native`) on a CPU.

The operator's programs run on CPU tensors here, with stand-in launch and matmul functions
(``ctypes`` callbacks with the driver's and cuSPARSELt's signatures) that compute on the
pointers they are handed: so the arguments the C++ code builds (pointers, offsets, strides,
grid, block, shared memory, the stream array) are checked, and so is every path back to
Python. The GPU tests run the same programs with the real driver and library.
"""

from __future__ import annotations

import ctypes
import gc
import shutil
import warnings
from functools import partial

import pytest
import torch

from explorer.gpu.cuda import native, native_table, ops
from explorer.gpu.cuda.native_table import NativeTable

pytestmark = pytest.mark.skipif(
    shutil.which("c++") is None, reason="no C++ compiler: the compiled operator cannot be built"
)

_LAUNCH = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.c_void_p,
    *(ctypes.c_uint,) * 7,
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.c_void_p,
)
_MATMUL = ctypes.CFUNCTYPE(ctypes.c_int, *(ctypes.c_void_p,) * 9, ctypes.c_void_p, ctypes.c_int32)
_SCALE_BITS = int.from_bytes(bytes(ctypes.c_float(3.0)), "little", signed=True)


def _floats(ptr: int, n: int):
    return (ctypes.c_float * n).from_address(ptr)


class _Kernels:
    """Stand-in functions for the operator, recording what they were handed."""

    def __init__(self) -> None:
        self.launches: list[dict] = []
        self.matmuls: list[tuple] = []
        self.code = 0
        self.launch = _LAUNCH(self._launch)
        self.matmul = _MATMUL(self._matmul)

    def _launch(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        # the test kernel, args (in, out, rows, in row stride, scale, out cols):
        # out[r, c] = scale * in[r * stride + c]
        read = [ctypes.c_int64.from_address(params[i]).value for i in (0, 1, 2, 3, 5)]
        scale = ctypes.c_float.from_address(params[4]).value
        in_ptr, out_ptr, rows, stride, cols = read
        rows &= 0xFFFFFFFF
        self.launches.append(
            dict(function=function, grid=(gx, gy, gz), block=(bx, by, bz), shared=shared,
                 stream=stream, rows=rows, stride=stride, scale=scale, in_ptr=in_ptr)
        )  # fmt: skip
        src, dst = _floats(in_ptr, rows * stride), _floats(out_ptr, rows * cols)
        for r in range(rows):
            for c in range(cols):
                dst[r * cols + c] = scale * src[r * stride + c]
        return self.code

    def _matmul(self, handle, plan, alpha, a, b, beta, c, d, workspace, streams, count):
        self.matmuls.append((handle, plan, alpha, a, b, beta, c, d, workspace, count))
        # the test "product": D = 10 * B, two columns of B per row (out_cols = in cols)
        n = ctypes.c_int64.from_address(a).value
        src, dst = _floats(b, n), _floats(d, n)
        for i in range(n):
            dst[i] = 10 * src[i]
        return self.code


class _Module(torch.nn.Module):
    """A registered module whose Python call is ``x + 1`` (the operator's fallback)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.op_id = ops.register(self)
        self.table = NativeTable(self.op_id)

    def run_compiled(self, x):
        self.calls += 1
        return x + 1

    def fake_output(self, x):
        return torch.empty_like(x)


@pytest.fixture(scope="module")
def built():
    if not native.load():
        pytest.fail(native.status())
    return True


@pytest.fixture
def kernels(built):
    saved = torch.ops.explorer.native_functions()
    fakes = _Kernels()
    launch = ctypes.cast(fakes.launch, ctypes.c_void_p).value
    matmul = ctypes.cast(fakes.matmul, ctypes.c_void_p).value
    torch.ops.explorer.native_set_functions(launch, 0, matmul)
    yield fakes
    torch.ops.explorer.native_set_functions(*saved)


class _Launcher:
    """Stands in for :class:`explorer.gpu.cuda.launch.Launcher`: its raw arguments only."""

    def __init__(self, rows: int, cols: int) -> None:
        self.slots = ((8, 0), (8, 0), (4, rows), (8, 0), (4, _SCALE_BITS), (8, cols))

    def raw_arguments(self):
        return 77, self.slots


class _Owner:
    """What a step's pointers belong to: its token retires when this is dropped."""


def _scale_step(rows: int, cols: int, offset: int = 0, owner=None):
    per_call = {0: (native.IN_PTR, offset), 1: (native.OUT_PTR, 0), 3: (native.IN_ROW_STRIDE, 0)}
    owner = owner if owner is not None else _KEEP.setdefault("owner", _Owner())
    launcher = _Launcher(rows, cols)
    return native.launch_step(launcher, (5, 1, 1), (64, 1, 1), 256, per_call, cols, owner)


_KEEP: dict = {}


def test_a_remembered_launch_runs_in_cpp_with_the_arguments_python_set(kernels):
    mod = _Module()
    x = torch.randn(4, 8)
    assert mod.table.remember_steps(x, [_scale_step(4, 8)], "compile", "wall")
    before = native.counts(mod.op_id)
    y = torch.ops.explorer.sparse_call(x, mod.op_id)
    torch.testing.assert_close(y, 3 * x, rtol=0, atol=0)
    assert mod.calls == 0
    (seen,) = kernels.launches
    assert seen["function"] == 77 and seen["grid"] == (5, 1, 1) and seen["block"] == (64, 1, 1)
    assert seen["shared"] == 256 and seen["rows"] == 4 and seen["stride"] == 8
    assert seen["in_ptr"] == x.data_ptr() and seen["scale"] == 3.0
    after = native.counts(mod.op_id)
    assert after["native_calls"] == before["native_calls"] + 1
    assert after["python_calls"] == before["python_calls"] and after["programs"] == 1


def test_leading_dims_are_kept_and_other_shapes_go_to_python(kernels):
    mod = _Module()
    x = torch.randn(2, 3, 8)
    mod.table.remember_steps(x, [_scale_step(6, 8)], "auto", "wall")
    y = torch.ops.explorer.sparse_call(x, mod.op_id)
    assert y.shape == (2, 3, 8)
    torch.testing.assert_close(y, 3 * x, rtol=0, atol=0)
    other = torch.randn(5, 8)  # another row count: Python decides
    torch.testing.assert_close(torch.ops.explorer.sparse_call(other, mod.op_id), other + 1)
    strided = torch.randn(8, 6).t()  # not row-major
    torch.testing.assert_close(torch.ops.explorer.sparse_call(strided, mod.op_id), strided + 1)
    half = torch.randn(2, 3, 8).half()  # another dtype
    torch.testing.assert_close(torch.ops.explorer.sparse_call(half, mod.op_id), half + 1)
    assert mod.calls == 3 and len(kernels.launches) == 1


def test_an_input_offset_reaches_the_kernel(kernels):
    mod = _Module()
    x = torch.randn(2, 8)
    # the kernel reads 4 columns from 4 floats into each row: the second half of each row
    mod.table.remember_steps(x, [_scale_step(2, 4, offset=16)], "eager", "wall")
    y = torch.ops.explorer.sparse_call(x, mod.op_id)
    assert kernels.launches[0]["in_ptr"] == x.data_ptr() + 16
    assert y.shape == (2, 4)
    torch.testing.assert_close(y, 3 * x[:, 4:], rtol=0, atol=0)


def test_a_retired_token_sends_the_call_back_to_python(kernels):
    mod = _Module()
    x = torch.randn(4, 8)
    owner = _Owner()
    mod.table.remember_steps(x, [_scale_step(4, 8, owner=owner)], "compile", "wall")
    torch.ops.explorer.sparse_call(x, mod.op_id)
    del owner
    gc.collect()
    torch.testing.assert_close(torch.ops.explorer.sparse_call(x, mod.op_id), x + 1)
    assert native.counts(mod.op_id)["programs"] == 0  # dropped at the lookup
    mod.table.remember_steps(x, [_scale_step(4, 8)], "compile", "wall")
    mod.table.forget()  # the module forgot its calls
    torch.testing.assert_close(torch.ops.explorer.sparse_call(x, mod.op_id), x + 1)
    assert mod.calls == 2 and len(kernels.launches) == 1


def test_a_graphs_layer_runs_its_program_only_inside_a_capture(kernels):
    mod = _Module()
    x = torch.randn(4, 8)
    mod.table.remember_steps(x, [_scale_step(4, 8)], "graphs", "gpu")
    # no capture here (a CPU tensor): the Python call, which warns of the mode, serves it
    torch.testing.assert_close(torch.ops.explorer.sparse_call(x, mod.op_id), x + 1)
    mod.table.remember_steps(x, [_scale_step(4, 8)], "auto", "gpu")  # another mode: reset
    assert native.counts(mod.op_id)["programs"] == 1
    torch.testing.assert_close(torch.ops.explorer.sparse_call(x, mod.op_id), x + 1)  # wall clock
    assert not kernels.launches


def test_a_matmul_step_gets_the_plan_pointers_and_the_stream_array(kernels):
    mod = _Module()
    x = torch.randn(3, 4)
    count = ctypes.c_int64(12)  # what the stand-in reads through "A": the element count
    step = native.MatmulStep(11, 12, 13, ctypes.addressof(count), 15, 16, 4, (native.new_token(),))
    mod.table.remember_steps(x, [step], "compile", "wall")
    y = torch.ops.explorer.sparse_call(x, mod.op_id)
    torch.testing.assert_close(y, 10 * x, rtol=0, atol=0)
    ((h, plan, alpha, a, b, beta, c, d, ws, n),) = kernels.matmuls
    assert (h, plan, alpha, a, beta, ws, n) == (11, 12, 13, ctypes.addressof(count), 15, 16, 1)
    assert b == x.data_ptr() and c == d == y.data_ptr()


def test_steps_chain_each_output_into_the_next(kernels):
    mod = _Module()
    x = torch.randn(2, 6)
    count = ctypes.c_int64(12)
    matmul = native.MatmulStep(1, 2, 3, ctypes.addressof(count), 5, 6, 6, (native.new_token(),))
    mod.table.remember_steps(x, [matmul, _scale_step(2, 6)], "compile", "wall")
    y = torch.ops.explorer.sparse_call(x, mod.op_id)
    torch.testing.assert_close(y, 30 * x)
    assert kernels.launches[0]["in_ptr"] == kernels.matmuls[0][7]  # the matmul's output


def test_a_linear_step_is_torchs_own_dense_product_on_the_tensors_it_holds(kernels):
    mod = _Module()
    x = torch.randn(2, 6)
    weight, bias = torch.randn(5, 6), torch.randn(5)
    step = native.LinearStep(weight, bias)
    assert step.out_cols == 5 and step.code() == [2, 5, 1]
    assert mod.table.remember_steps(x, [step], "compile", "wall")
    torch.testing.assert_close(
        torch.ops.explorer.sparse_call(x, mod.op_id), torch.nn.functional.linear(x, weight, bias),
        rtol=0, atol=0,
    )  # fmt: skip
    del weight, bias, step
    gc.collect()  # the program holds the tensors: no pointer outlives them
    count = ctypes.c_int64(10)  # a matmul (10 * x, 5 columns), then a product without bias
    matmul = native.MatmulStep(1, 2, 3, ctypes.addressof(count), 5, 6, 5, (native.new_token(),))
    weight = torch.randn(3, 5)
    x = torch.randn(2, 5)
    mod.table.remember_steps(x, [matmul, native.LinearStep(weight)], "compile", "wall")
    y = torch.ops.explorer.sparse_call(x, mod.op_id)
    torch.testing.assert_close(y, (10 * x) @ weight.T)
    assert mod.calls == 0 and native.counts(mod.op_id)["programs"] == 2


def test_a_linear_step_the_product_refuses_goes_to_python(kernels):
    mod = _Module()
    x = torch.randn(4, 8)
    mod.table.remember_steps(x, [native.LinearStep(torch.randn(8, 8).double())], "eager", "wall")
    before = native.counts()
    torch.testing.assert_close(torch.ops.explorer.sparse_call(x, mod.op_id), x + 1)
    after = native.counts()
    assert after["refused_calls"] == before["refused_calls"] + 1 and mod.calls == 1


def test_a_refused_launch_is_made_again_by_python(kernels):
    mod = _Module()
    x = torch.randn(4, 8)
    mod.table.remember_steps(x, [_scale_step(4, 8)], "compile", "wall")
    kernels.code = 719  # the driver refuses: Python makes the call (and raises if it fails too)
    before = native.counts()
    torch.testing.assert_close(torch.ops.explorer.sparse_call(x, mod.op_id), x + 1)
    after = native.counts()
    assert after["refused_calls"] == before["refused_calls"] + 1
    assert after["python_calls"] == before["python_calls"] + 1 and mod.calls == 1


def test_a_step_set_up_before_loading_makes_no_program(kernels):
    mod = _Module()
    x = torch.randn(4, 8)
    tokenless = native.MatmulStep(1, 2, 3, 4, 5, 6, 8, (0,))
    assert not mod.table.remember_steps(x, [tokenless], "compile", "wall")
    assert not mod.table.remember_steps(x, None, "compile", "wall")
    assert native.counts(mod.op_id)["programs"] == 0


def test_a_gone_module_drops_its_programs(kernels):
    mod = _Module()
    mid = mod.op_id
    mod.table.remember_steps(torch.randn(4, 8), [_scale_step(4, 8)], "compile", "wall")
    assert native.counts(mid)["programs"] == 1
    del mod
    gc.collect()
    assert native.counts(mid)["programs"] == 0
    with pytest.raises(RuntimeError, match="no longer exists"):
        torch.ops.explorer.sparse_call(torch.randn(4, 8), mid)


def test_the_op_serves_compiled_calls_with_the_fake_shape(kernels):
    mod = _Module()
    x = torch.randn(4, 8)
    mod.table.remember_steps(x, [_scale_step(4, 8)], "compile", "wall")
    assert ops.forward(x, mod.op_id).eq(3 * x).all()  # ops.forward calls the compiled operator
    compiled = torch.compile(
        lambda t: ops.forward(t, mod.op_id) * 2, backend="eager", fullgraph=True
    )
    torch.testing.assert_close(compiled(x), 6 * x)
    torch.library.opcheck(
        torch.ops.explorer.sparse_call.default, (torch.randn(3, 8), mod.op_id),
        test_utils=("test_schema", "test_faketensor"),
    )  # fmt: skip


def test_bad_steps_are_refused_with_the_reason(built):
    mod = _Module()
    x = torch.randn(4, 8)
    token = (native.new_token(),)
    with pytest.raises(ValueError, match="output has columns: 0"):
        mod.table.remember_steps(
            x, [native.MatmulStep(1, 2, 3, 4, 5, 6, 0, token)], "eager", "wall"
        )
    bad_source = native.LaunchStep(1, (1, 1, 1), (1, 1, 1), 0, ((7, 8, 0),), 8, token)
    with pytest.raises(ValueError, match="unknown argument source 7"):
        mod.table.remember_steps(x, [bad_source], "eager", "wall")
    bad_size = native.LaunchStep(1, (1, 1, 1), (1, 1, 1), 0, ((0, 2, 0),), 8, token)
    with pytest.raises(ValueError, match="size in bytes is 2"):
        mod.table.remember_steps(x, [bad_size], "eager", "wall")
    assert native.counts(mod.op_id)["programs"] == 0
    wrong = torch.ops.explorer.native_set_program(
        1, 0, 0, 4, 8, torch.float32, -1, [1], [1, 8, 2], []
    )
    assert "ends early" in wrong
    assert "unknown clock 5" in torch.ops.explorer.native_set_program(
        1, 0, 5, 4, 8, torch.float32, -1, [1], [], []
    )
    weight = torch.randn(8, 8)
    set_program = partial(torch.ops.explorer.native_set_program, 1, 0, 0, 4, 8, torch.float32, -1)
    assert "does not have the step's output rows: 4" in set_program([1], [2, 4, 0], [weight])
    assert "bias flag is 3" in set_program([1], [2, 8, 3], [weight])
    assert "more tensors than were handed: 1" in set_program([1], [2, 8, 1], [weight])
    assert "named by no step: 1" in set_program([1], [], [weight])


def test_a_machine_without_a_compiler_is_told_how_to_fix_it():
    import os
    import subprocess
    import sys

    script = (
        "import warnings\n"
        "from explorer.gpu.cuda import native\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        "    assert native.load() is False\n"
        "print(seen[0].category.__name__, seen[0].message)\n"
        "print(native.status())\n"
    )
    env = {**os.environ, "CXX": "no-such-compiler", "SPARSITY_EXPLORER_NATIVE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "RuntimeWarning" in out and "no-such-compiler not found" in out
    assert "apt-get install g++" in out and "SPARSITY_EXPLORER_NATIVE=0" in out
    assert "not in use (it has no C++ compiler" in out


def test_status_says_it_is_in_use(built):
    assert "in use" in native.status()
    assert repr(NativeTable(3)).startswith("NativeTable(module 3")


def test_a_wall_program_serves_the_eager_calls_of_its_inputs(kernels):
    mod = _Module()
    x = torch.randn(2, 3, 8)
    key = (x.shape, x.stride(), -1, x.dtype)
    assert mod.table.remember_steps(x, [_scale_step(6, 8)], "eager", "wall")
    call = mod.table.eager[key]
    torch.testing.assert_close(call(x), 3 * x, rtol=0, atol=0)  # made in C++
    assert mod.calls == 0 and len(kernels.launches) == 1
    mod.table.remember_steps(x.reshape(6, 8), None, "eager", "wall")  # the route changed
    assert key not in mod.table.eager  # any input of those rows: its eager call goes
    torch.testing.assert_close(call(x), x + 1)  # a stale call: Python's, never a wrong one
    mod.table.remember_steps(x, None, "eager", "wall")
    assert mod.table.eager == {key: None}  # asked, no program: the eager call stays Python's


def test_gpu_clock_and_graphs_programs_serve_no_eager_call(kernels):
    mod = _Module()
    x = torch.randn(4, 8)
    assert mod.table.remember_steps(x, [_scale_step(4, 8)], "auto", "gpu")
    assert mod.table.remember_steps(x, [_scale_step(4, 8)], "graphs", "gpu")
    assert not mod.table.eager
    mod.table.remember_steps(x, [_scale_step(4, 8)], "auto", "wall")
    assert mod.table.remember_steps(x, [_scale_step(4, 8)], "auto", "gpu")
    assert len(mod.table.eager) == 1  # a GPU-clock program leaves the wall clock's eager call


def test_forgetting_a_table_forgets_the_tables_tied_to_it(kernels):
    part, block = _Module(), _Module()
    x = torch.randn(4, 8)
    part.table.remember_steps(x, [_scale_step(4, 8)], "eager", "wall")
    block.table.remember_steps(x, [_scale_step(4, 8)], "eager", "wall")
    part.table.tie(block.table)
    part.table.forget()
    assert not block.table.eager and native.counts(block.op_id)["programs"] == 0
    torch.testing.assert_close(torch.ops.explorer.sparse_call(x, block.op_id), x + 1)
    block.table.remember_steps(x, [_scale_step(4, 8)], "eager", "wall")
    part.table.forget()  # untied by the first forget: the block keeps its new program
    assert len(block.table.eager) == 1
    assert "1 programs, 1 eager inputs" in repr(block.table)


class _Scale:
    """A remembered call with a program: ``3 * x`` from Python and from C++ alike."""

    def __init__(self, rows: int, cols: int) -> None:
        self.owner = _Owner()
        self.steps = [_scale_step(rows, cols, owner=self.owner)]
        self.python_calls = 0

    def __call__(self, x):
        self.python_calls += 1
        return 3 * x

    def native_steps(self):
        return self.steps


def test_routes_are_timed_through_the_operator_where_it_makes_their_call(kernels):
    x = torch.randn(4, 8)
    scale = _Scale(4, 8)
    made = native_table.operator_calls(x, {"scale": scale, "plain": lambda t: 2 * t})
    assert list(made) == ["scale"]  # the plain call has no program
    torch.testing.assert_close(made["scale"](), 3 * x, rtol=0, atol=0)
    assert scale.python_calls == 0 and len(kernels.launches) == 1
    mid = made["scale"].keywords["module_id"]
    assert native.counts(mid)["programs"] == 1
    del made
    gc.collect()
    assert native.counts(mid)["programs"] == 0  # the stand-in went, and its program
    strided = torch.randn(8, 4).t()
    assert native_table.operator_calls(strided, {"scale": _Scale(4, 8)}) == {}


def test_the_hint_for_inputs_that_need_gradients_is_given_once(monkeypatch):
    monkeypatch.setattr(native_table, "_GRAD_HINT_DUE", [True])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):
            native_table.hint_grad_input()
    assert len(seen) == 1 and issubclass(seen[0].category, RuntimeWarning)
    assert "torch.inference_mode() or torch.no_grad()" in str(seen[0].message)
