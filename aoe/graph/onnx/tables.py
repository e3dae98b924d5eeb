"""The ONNX importer's tables: element types, the ONNX -> CANN names of simple operators, arities."""

# constant values are computed only up to this many elements; bigger constants keep shape and dtype
VALUE_CAP = 1 << 16

ONNX_DTYPES = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 8: "string",
    9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 14: "complex64",
    15: "complex128", 16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2",
    20: "float8e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4e2m1", 24: "float8e8m0",
}
FLOAT_DTYPES = {"float16", "float32", "float64", "bfloat16"}
# dtypes numpy can hold, so constant values of these types can be evaluated
NP_DTYPES = {"float16", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
             "int64", "uint64", "bool"}

# ONNX op -> CANN op for elementwise operators with one data input (attributes copied through)
UNARY = {
    "Relu": "Relu", "Sigmoid": "Sigmoid", "Tanh": "Tanh", "Erf": "Erf", "Sqrt": "Sqrt", "Exp": "Exp",
    "Log": "Log", "Neg": "Neg", "Abs": "Abs", "Reciprocal": "Reciprocal", "Floor": "Floor",
    "Ceil": "Ceil", "Not": "LogicalNot", "Softplus": "Softplus", "Elu": "Elu", "LeakyRelu": "LeakyRelu",
    "HardSigmoid": "HardSigmoid", "HardSwish": "HardSwish", "Gelu": "Gelu", "Sign": "Sign",
    "Sin": "Sin", "Cos": "Cos", "Round": "Round", "Softsign": "Softsign", "Selu": "Selu",
    "Mish": "Mish", "IsNaN": "IsNan", "IsInf": "IsInf",
}
# ONNX op -> CANN op for broadcasting binary operators
BINARY = {
    "Add": "Add", "Sub": "Sub", "Mul": "Mul", "Div": "RealDiv", "Pow": "Pow", "Max": "Maximum",
    "Min": "Minimum", "Equal": "Equal", "Less": "Less", "Greater": "Greater",
    "LessOrEqual": "LessEqual", "GreaterOrEqual": "GreaterEqual", "And": "LogicalAnd",
    "Or": "LogicalOr", "Xor": "LogicalXor", "Mod": "FloorMod", "PRelu": "PRelu",
}
BOOL_OUT = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not",
            "IsNaN", "IsInf"}
REDUCE = {"ReduceSum": "ReduceSumD", "ReduceMean": "ReduceMeanD", "ReduceMax": "ReduceMaxD",
          "ReduceMin": "ReduceMinD", "ReduceProd": "ReduceProdD", "ReduceL2": "ReduceL2",
          "ReduceSumSquare": "ReduceSumSquare", "ReduceLogSumExp": "ReduceLogSumExp"}
VIEWS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}
# nodes that must never be folded even when their inputs are constant
NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
           "Bernoulli"}

# inputs that must be present (by position) for the rules of an ONNX operator; default 1
ARITY = {**{k: 2 for k in BINARY}, "MatMul": 2, "Gemm": 2, "Conv": 2, "ConvTranspose": 2,
         "BatchNormalization": 5, "LayerNormalization": 2, "Gather": 2, "GatherElements": 2, "Where": 3,
         "Expand": 2, "Tile": 2, "Range": 3, "CastLike": 2, "TopK": 2, "Constant": 0}

