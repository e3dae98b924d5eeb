"""The operator catalogue (`aoe.ops.describe`): kernel model, bank key, Format and Impl choices per CANN operator."""
from __future__ import annotations

import pytest

from aoe import sim
from aoe.codes import dtype_code, format_code
from aoe.graph.ir import Graph, Op, Tensor
from aoe.ops import BOTH, HIGH_PERFORMANCE, HIGH_PRECISION, PERF_ONLY, Unsupported, describe


def one_op(op_type: str, inputs: list[tuple], outputs: list[tuple], **attrs) -> tuple[Graph, Op]:
    """A graph of one operator; tensors given as (shape, kind[, dtype[, format]])."""
    tensors: dict[str, Tensor] = {}

    def add(prefix: str, specs: list[tuple]) -> list[str]:
        names = []
        for i, spec in enumerate(specs):
            shape, kind, *rest = spec
            dtype = rest[0] if rest else "float16"
            fmt = rest[1] if len(rest) > 1 else "ND"
            name = f"{prefix}{i}"
            tensors[name] = Tensor(name, shape, dtype, fmt, kind)
            names.append(name)
        return names

    ins, outs = add("in", inputs), add("out", outputs)
    op = Op("op", op_type, ins, outs, attrs)
    return Graph("g", tensors, [op], [n for n in ins if tensors[n].kind == "input"], outs), op


def case(op_type: str, inputs: list[tuple], outputs: list[tuple], **attrs):
    g, op = one_op(op_type, inputs, outputs, **attrs)
    return describe(g, op)


# --- matmul -------------------------------------------------------------------------------------

def test_matmul_kernel_model_and_bank_key():
    c = case("MatMulV2", [((48, 64), "input"), ((64, 32), "param")], [((48, 32), "activation")])
    assert c.family == "matmul" and c.op_type == "MatMulV2" and c.op_name == "op"
    assert c.default.label == "ND,ND,ND" and not c.default.extra_ops
    assert c.default.sim_op == sim.MatMul(m=48, n=32, k=64, batch_b=1, op_type="MatMulV2")
    f16, nd = dtype_code("float16"), format_code("ND")
    assert {k: c.key[k] for k in ("m", "k", "n", "a_dtype", "b_dtype", "out_dtype", "a_format", "b_format",
                                  "out_format")} == {"m": 48, "k": 64, "n": 32, "a_dtype": f16, "b_dtype": f16,
                                                     "out_dtype": f16, "a_format": nd, "b_format": nd,
                                                     "out_format": nd}
    assert (c.key["m_align_flag"], c.key["k_align_flag"], c.key["n_align_flag"]) == (1, 1, 1)
    assert (c.key["trans_a_flag"], c.key["trans_b_flag"], c.key["bias_flag"]) == (0, 0, 0)
    assert all(c.key[f"batch_{s}{i}"] == 1 for s in "ab" for i in range(1, 5))
    odd = case("MatMulV2", [((50, 64), "input"), ((64, 33), "param")], [((50, 33), "activation")])
    assert (odd.key["m_align_flag"], odd.key["k_align_flag"], odd.key["n_align_flag"]) == (0, 1, 0)


def test_matmul_transposes_read_m_k_n_from_the_right_axes():
    c = case("MatMulV2", [((64, 48), "input"), ((32, 64), "param")], [((48, 32), "activation")],
             transpose_x1=True, transpose_x2=True)
    op = c.default.sim_op
    assert (op.m, op.k, op.n, op.trans_a, op.trans_b) == (48, 64, 32, True, True)
    assert (c.key["trans_a_flag"], c.key["trans_b_flag"]) == (1, 1)


def test_batch_matmul_folds_a_shared_weight_and_keeps_real_batches():
    folded = case("BatchMatMulV2", [((4, 128, 64), "activation"), ((64, 256), "param")],
                  [((4, 128, 256), "activation")])
    op = folded.default.sim_op
    assert (op.m, op.k, op.n, op.batch, op.batch_b) == (512, 64, 256, 1, 1)     # [B,S,K] x [K,N]: B*S rows
    assert folded.key["batch_a1"] == 4 and folded.key["m"] == 512
    batched = case("BatchMatMulV2", [((2, 6, 128, 64), "activation"), ((2, 6, 64, 128), "activation")],
                   [((2, 6, 128, 128), "activation")])
    op = batched.default.sim_op
    assert (op.m, op.k, op.n, op.batch, op.batch_b, op.op_type) == (128, 64, 128, 12, 12, "BatchMatMulV2")
    assert (batched.key["batch_a1"], batched.key["batch_a2"], batched.key["batch_b1"]) == (2, 6, 2)
    with pytest.raises(Unsupported, match="broadcast"):
        case("BatchMatMulV2", [((3, 16, 16), "activation"), ((5, 16, 16), "activation")],
             [((3, 16, 16), "activation")])
    with pytest.raises(Unsupported, match="K mismatch"):
        case("MatMulV2", [((16, 32), "input"), ((16, 16), "param")], [((16, 16), "activation")])


def test_matmul_formats_nz_weight_is_free_and_activations_pay_transdata():
    c = case("MatMulV2", [((48, 64), "activation"), ((64, 32), "param")], [((48, 32), "activation")])
    by_label = {v.label: v for v in c.formats}
    assert list(by_label)[0] == "ND,ND,ND" and len(by_label) == 8
    assert set(by_label) == {f"{a},{b},{o}" for a in ("ND", "NZ") for b in ("ND", "NZ") for o in ("ND", "NZ")}
    assert by_label["ND,NZ,ND"].extra_ops == ()                       # the weight is stored in NZ once
    assert by_label["ND,NZ,ND"].knowledge == {"formats": ["ND", "FRACTAL_NZ", "ND"]}
    assert by_label["ND,NZ,ND"].sim_op.b_format == "FRACTAL_NZ"
    (to_nz,) = by_label["NZ,ND,ND"].extra_ops                        # the activation is converted each run
    assert (to_nz.op_type, to_nz.shape, to_nz.src_format, to_nz.dst_format) == ("TransData", (48, 64), "ND",
                                                                                 "FRACTAL_NZ")
    (back,) = by_label["ND,ND,NZ"].extra_ops                         # an NZ result is converted back
    assert (back.shape, back.src_format, back.dst_format) == ((48, 32), "FRACTAL_NZ", "ND")
    assert len(by_label["NZ,NZ,NZ"].extra_ops) == 2
    # when both operands are activations, an NZ weight operand is no longer free
    both = case("MatMulV2", [((48, 64), "activation"), ((64, 32), "activation")], [((48, 32), "activation")])
    assert len(next(v for v in both.formats if v.label == "ND,NZ,ND").extra_ops) == 1


def test_matmul_impls_gemv_only_for_tiny_m_and_only_under_high_performance():
    tiny = case("MatMulV2", [((8, 1024), "input"), ((1024, 512), "param")], [((8, 512), "activation")])
    labels = [v.label for v in tiny.impls]
    assert labels == ["cube", "vector_gemv"]
    cube, gemv = tiny.impls
    assert cube.modes == BOTH and cube.sim_op == tiny.default.sim_op
    assert gemv.modes == PERF_ONLY and HIGH_PRECISION not in gemv.modes
    assert gemv.sim_op.op_type == "Gemv" and gemv.sim_op.shape == (1024, 512)
    big = case("MatMulV2", [((64, 1024), "input"), ((1024, 512), "param")], [((64, 512), "activation")])
    assert [v.label for v in big.impls] == ["cube"]
    trans_b = case("MatMulV2", [((8, 1024), "input"), ((512, 1024), "param")], [((8, 512), "activation")],
                   transpose_x2=True)
    assert [v.label for v in trans_b.impls] == ["cube"]


# --- convolution --------------------------------------------------------------------------------

def test_conv2d_kernel_model_and_bank_key():
    c = case("Conv2D", [((2, 16, 28, 28), "input", "float16", "NCHW"), ((32, 16, 3, 3), "param", "float16", "NCHW")],
             [((2, 32, 14, 14), "activation", "float16", "NCHW")], strides=[2, 2], pads=[1, 1, 1, 1],
             dilations=[1, 1], groups=1)
    assert c.family == "conv" and c.formats == (c.default,) and c.default.label == "NC1HWC0"
    assert c.default.sim_op == sim.Conv2D(x=(2, 16, 28, 28), weight=(32, 16, 3, 3), strides=(2, 2),
                                          pads=(1, 1, 1, 1), op_type="Conv2D")
    assert (c.key["c_shape_h"], c.key["c_shape_w"]) == (14, 14)
    assert (c.key["a_shape_c"], c.key["b_shape_n"], c.key["stride_h"], c.key["pad_left"]) == (16, 32, 2, 1)
    assert c.key["a_format"] == format_code("NC1HWC0") and c.key["b_format"] == format_code("FRACTAL_Z")
    assert [v.label for v in c.impls] == ["img2col_cube"]


def test_conv_impls_1x1_as_matmul_and_depthwise_on_the_vector_unit():
    one = case("Conv2D", [((2, 64, 14, 14), "input", "float16", "NCHW"), ((128, 64, 1, 1), "param")],
               [((2, 128, 14, 14), "activation", "float16", "NCHW")])
    assert [v.label for v in one.impls] == ["img2col_cube", "conv1x1_as_matmul"]
    mm = one.impls[1].sim_op
    assert (mm.m, mm.n, mm.k) == (2 * 14 * 14, 128, 64) and mm.a_format == "FRACTAL_NZ"
    assert one.impls[1].modes == BOTH
    dw = case("Conv2D", [((1, 32, 16, 16), "input", "float16", "NCHW"), ((32, 1, 3, 3), "param")],
              [((1, 32, 16, 16), "activation", "float16", "NCHW")], pads=[1, 1, 1, 1], groups=32)
    assert [v.label for v in dw.impls] == ["img2col_cube", "depthwise_vector"]
    vec = dw.impls[1].sim_op
    assert vec.op_type == "DepthwiseConv2D" and vec.shape == (1, 32, 18, 18) and vec.ksize == (3, 3)
    strided = case("Conv2D", [((2, 64, 14, 14), "input"), ((128, 64, 1, 1), "param")],
                   [((2, 128, 7, 7), "activation")], strides=[2, 2])
    assert [v.label for v in strided.impls] == ["img2col_cube"]        # a strided 1x1 is not a plain matmul


def test_conv_backprops_read_their_shapes_from_attrs_and_operands():
    bi = case("Conv2DBackpropInput", [((32, 16, 3, 3), "param"), ((2, 32, 14, 14), "activation")],
              [((2, 16, 14, 14), "activation")], input_size=[2, 16, 14, 14], pads=[1, 1, 1, 1])
    op = bi.default.sim_op
    assert (op.op_type, op.x, op.weight) == ("Conv2DBackpropInput", (2, 16, 14, 14), (32, 16, 3, 3))
    assert bi.op_type == "Conv2DBackpropInput" and bi.key["a_shape_c"] == 16
    bf = case("Conv2DBackpropFilter", [((2, 16, 14, 14), "activation"), ((2, 32, 14, 14), "activation")],
              [((32, 16, 3, 3), "activation")], filter_size=[32, 16, 3, 3], pads=[1, 1, 1, 1])
    op = bf.default.sim_op
    assert (op.op_type, op.x, op.weight) == ("Conv2DBackpropFilter", (2, 16, 14, 14), (32, 16, 3, 3))
    # without the attribute the output's shape is the filter
    bf2 = case("Conv2DBackpropFilter", [((2, 16, 14, 14), "activation"), ((2, 32, 14, 14), "activation")],
               [((32, 16, 3, 3), "activation")], pads=[1, 1, 1, 1])
    assert bf2.default.sim_op == bf.default.sim_op and bf2.key == bf.key
    with pytest.raises(Unsupported, match="not 2-D"):
        case("Conv2D", [((2, 16, 28), "input"), ((32, 16, 3), "param")], [((2, 32, 26), "activation")])


# --- vector operators ---------------------------------------------------------------------------

def test_vector_ops_map_to_their_kernel_models():
    relu = case("Relu", [((64, 1024), "input")], [((64, 1024), "activation")])
    assert relu.family == "vector" and relu.default.sim_op == sim.VectorOp("Relu", (64, 1024))
    six = case("Relu6", [((64, 1024), "input")], [((64, 1024), "activation")])
    assert six.default.sim_op.op_type == "ClipByValue" and six.op_type == "Relu6"   # priced like a clip
    sm = case("SoftmaxV2", [((8, 128, 128), "input")], [((8, 128, 128), "activation")], axes=[-1])
    assert sm.default.sim_op.axes == (2,)
    ln = case("LayerNorm", [((32, 128, 768), "input"), ((768,), "param"), ((768,), "param")],
              [((32, 128, 768), "activation")], begin_norm_axis=1)
    assert ln.default.sim_op.axes == (1, 2)
    add = case("Add", [((32, 128, 768), "input"), ((768,), "param")], [((32, 128, 768), "activation")])
    assert add.default.sim_op.shape == (32, 128, 768) and add.default.sim_op.broadcast == (0, 1)
    cast = case("Cast", [((64, 64), "input", "float32")], [((64, 64), "activation", "float16")])
    assert (cast.default.sim_op.dtype, cast.default.sim_op.out_dtype) == ("float32", "float16")
    assert sm.key["op_type"] == "SoftmaxV2" and sm.key["input_shapes"] == [[8, 128, 128]]
    assert sm.key["input_dtypes"] == [dtype_code("float16")] and sm.key["attrs"] == {"axes": [-1]}


def test_vector_formats_nc1hwc0_pads_channels_and_nchw_pays_two_transdata():
    c = case("Relu", [((2, 20, 8, 8), "activation", "float16", "NCHW")],
             [((2, 20, 8, 8), "activation", "float16", "NCHW")])
    assert c.default.label == "NC1HWC0" and c.default.sim_op.shape == (2, 32, 8, 8)   # C padded to C0 = 16
    (nchw,) = c.formats[1:]
    assert nchw.label == "NCHW" and nchw.sim_op.shape == (2, 20, 8, 8)
    assert [(t.src_format, t.dst_format) for t in nchw.extra_ops] == [("NC1HWC0", "NCHW"), ("NCHW", "NC1HWC0")]
    aligned = case("Relu", [((2, 32, 8, 8), "activation", "float16", "NCHW")],
                   [((2, 32, 8, 8), "activation", "float16", "NCHW")])
    assert aligned.formats == (aligned.default,)                     # nothing to save: no alternative


def test_vector_impls_per_precision_mode():
    red = case("ReduceSumD", [((4096, 1024), "input")], [((1024,), "activation")], axes=[0])
    assert [v.knowledge for v in red.impls] == [{"impl": i} for i in range(len(red.impls))]
    assert len(red.impls) >= 2
    assert red.impls[0].modes == BOTH
    assert red.impls[1].modes == PERF_ONLY               # atomic accumulation across cores
    relu = case("Relu", [((64, 1024), "input")], [((64, 1024), "activation")])
    assert all(v.modes == BOTH for v in relu.impls)


@pytest.mark.parametrize("op_type,inputs,outputs,attrs", [
    ("MatMulV2", [((8, 1024), "input"), ((1024, 512), "param")], [((8, 512), "activation")], {}),
    ("ReduceMeanD", [((16, 65536), "input")], [((16,), "activation")], {"axes": [1]}),
    ("ReduceSumD", [((4096, 1024), "input")], [((1,), "activation")], {"axes": [0, 1]}),
    ("Conv2D", [((1, 32, 16, 16), "input", "float16", "NCHW"), ((32, 1, 3, 3), "param")],
     [((1, 32, 16, 16), "activation")], {"pads": [1, 1, 1, 1], "groups": 32}),
])
def test_high_precision_variants_keep_the_precision(op_type, inputs, outputs, attrs):
    c = case(op_type, inputs, outputs, **attrs)
    allowed = [v for v in c.impls if HIGH_PRECISION in v.modes]
    assert allowed and c.impls[0] in allowed                        # CANN's default is always allowed
    for v in allowed:
        assert v.sim_op.dtype == c.default.sim_op.dtype              # no lower-precision kernel
        assert v.knowledge.get("impl") not in ("vector_gemv", "split_k")
        if c.family == "vector":
            assert not (c.op_type.startswith("Reduce") and v.knowledge["impl"] == 1)
    assert all(HIGH_PERFORMANCE in v.modes for v in c.impls)         # high_performance allows everything


# --- what cannot be tuned -------------------------------------------------------------------------

def test_unsupported_operators_say_why():
    with pytest.raises(Unsupported, match="dynamic shape"):
        case("Relu", [((-1, 64), "input")], [((-1, 64), "activation")])
    with pytest.raises(Unsupported, match="dynamic shape"):
        case("MatMulV2", [((16, 64), "input"), ((64, 32), "param")], [((16, -1), "activation")])
    with pytest.raises(Unsupported, match="'NonZero' is not supported"):
        case("Opaque", [((16, 64), "input")], [((16, 64), "activation")], onnx_type="NonZero")
    with pytest.raises(Unsupported, match="no kernel model for FrobnicateV9"):
        case("FrobnicateV9", [((16, 64), "input")], [((16, 64), "activation")])
    with pytest.raises(Unsupported, match="view"):
        case("Reshape", [((16, 64), "input")], [((64, 16), "activation")], view=True)
    with pytest.raises(Unsupported, match="rank 9"):
        case("Relu", [((1,) * 9, "input")], [((1,) * 9, "activation")])
    with pytest.raises(Unsupported, match="window larger"):
        case("MaxPool", [((1, 16, 2, 2), "input")], [((1, 16, 1, 1), "activation")], ksize=[3, 3])


def test_identical_operators_share_one_case_and_shapes_make_another():
    a = case("MatMulV2", [((64, 64), "input"), ((64, 64), "param")], [((64, 64), "activation")])
    g, op = one_op("MatMulV2", [((64, 64), "input"), ((64, 64), "param")], [((64, 64), "activation")])
    op.name = "other"
    b = describe(g, op)
    assert a.case_id == b.case_id and b.op_name == "other"
    c = case("MatMulV2", [((64, 128), "input"), ((128, 64), "param")], [((64, 64), "activation")])
    assert c.case_id != a.case_id
    relu = case("Relu", [((64, 64), "input")], [((64, 64), "activation")])
    gelu = case("Gelu", [((64, 64), "input")], [((64, 64), "activation")])
    assert relu.case_id != gelu.case_id


# --- Format of vector operators next to Cube operators ----------------------------------------------

def attention(b: int = 2, s: int = 128, h: int = 4, d: int = 64, extra_reader: bool = False) -> Graph:
    """BatchMatMul -> SoftmaxV2 -> BatchMatMul (the scale and mask fused into the first one, as CANN does)."""
    shapes = {"q": (b, h, s, d), "kt": (b, h, d, s), "scores": (b, h, s, s), "probs": (b, h, s, s),
              "v": (b, h, s, d), "ctx": (b, h, s, d), "r": (b, h, s, s)}
    ts = {n: Tensor(n, sh, "float16", "ND", "activation") for n, sh in shapes.items()}
    ops = [Op("mm", "BatchMatMulV2", ["q", "kt"], ["scores"], {}),
           Op("softmax", "SoftmaxV2", ["scores"], ["probs"], {"axes": [3]}),
           Op("mm1", "BatchMatMulV2", ["probs", "v"], ["ctx"], {})]
    if extra_reader:
        ops.append(Op("relu", "Relu", ["probs"], ["r"], {}))
    return Graph("attn", ts, ops, ["q", "kt", "v"], ["ctx", "r"] if extra_reader else ["ctx"])


def test_a_vector_op_between_cube_ops_may_run_in_fractal_nz():
    g = attention()
    c = describe(g, g.ops[1])
    nd, nz = c.formats
    assert (nd.label, nz.label) == ("ND", "NZ") and c.default is nd
    assert nz.sim_op.shape == (2, 4, 128, 128) and nz.sim_op.in_format == nz.sim_op.out_format == "FRACTAL_NZ"
    assert nz.knowledge == {"formats": ["FRACTAL_NZ"]} and nz.extra_ops == ()      # both edges are Cube edges
    assert [e.layout for e in nd.cube_edges] == ["ND", "ND"] and [e.layout for e in nz.cube_edges] == ["FRACTAL_NZ"] * 2
    into, out = nd.cube_edges
    assert (into.transdata.src_format, into.transdata.dst_format) == ("FRACTAL_NZ", "ND")   # from the first matmul
    assert (out.transdata.src_format, out.transdata.dst_format) == ("ND", "FRACTAL_NZ")     # into the second
    assert into.cube_nz[0].c_format == "FRACTAL_NZ" and into.cube_nd[0].c_format == "ND"
    assert out.cube_nz[0].a_format == "FRACTAL_NZ" and out.cube_nd[0] == describe(g, g.ops[2]).default.sim_op
    assert all(v.cube_edges == nd.cube_edges for v in c.impls)     # other kernels run in the default layout
    assert c.key["attrs"]["cube_edges"] == ["in", "out"]          # another context, another case
    alone = case("SoftmaxV2", [((2, 4, 128, 128), "input")], [((2, 4, 128, 128), "activation")], axes=[3])
    assert [v.label for v in alone.formats] == ["ND"] and "cube_edges" not in alone.key["attrs"]
    assert alone.case_id != c.case_id


def test_an_nz_vector_op_pays_transdata_towards_its_other_neighbours():
    g = attention(s=100, extra_reader=True)             # the softmax output is also read by a Relu in ND
    nd, nz = describe(g, g.ops[1]).formats
    assert nz.sim_op.shape == (2, 4, 112, 112)           # the fractal layout pads both inner dims to 16
    (back,) = nz.extra_ops
    assert (back.src_format, back.dst_format, back.shape) == ("FRACTAL_NZ", "ND", (2, 4, 100, 100))
    # a matmul output read by two operators is no Cube edge of either (its layout is not theirs to choose)
    g.ops[3] = Op("relu", "Relu", ["scores"], ["r"], {})
    c = describe(g, g.ops[1])
    assert c.key["attrs"]["cube_edges"] == ["out"]


def test_a_matmul_leaves_the_layout_of_a_cube_edge_to_its_vector_neighbour():
    g = attention()
    first, second = describe(g, g.ops[0]), describe(g, g.ops[2])
    # scores (the first matmul's output) and probs (the second's A) are the softmax's choice: no NZ there,
    # so the TransData of that edge is never priced twice
    assert all(v.sim_op.c_format == "ND" for v in first.formats)
    assert all(v.sim_op.a_format == "ND" for v in second.formats)
    assert any(v.sim_op.a_format == "FRACTAL_NZ" for v in first.formats)       # q is no Cube edge
    assert any(v.sim_op.b_format == "FRACTAL_NZ" for v in second.formats)
    plain = case("BatchMatMulV2", [((2, 4, 128, 64), "activation"), ((2, 4, 64, 128), "activation")],
                 [((2, 4, 128, 128), "activation")])
    assert len(plain.formats) == 8


@pytest.mark.parametrize("op_type,kernel", [("AssignAdd", "Add"), ("AssignSub", "Sub"), ("DivNoNan", "RealDiv")])
def test_tensorflow_variable_updates_are_priced_as_their_elementwise_kernel(op_type, kernel):
    """Keras 3 optimizers update variables in place; each update costs one elementwise pass."""
    from aoe.graph.singleop import single_ops_graph
    from aoe.sim import simulate

    desc = {"shape": [1024, 768], "type": "float16", "format": "ND"}
    g = single_ops_graph({"op": op_type, "input_desc": [desc, desc], "output_desc": [desc]})
    case = describe(g, g.ops[0])
    assert case.op_type == op_type and case.default.sim_op.op_type == kernel
    assert simulate("Ascend910B2", case.default.sim_op).valid
