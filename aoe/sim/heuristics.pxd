# Augments heuristics.py where Cython compiles it (CMakeLists.txt); the interpreter never reads this file.
# The integer helpers become C-level calls (cpdef: still Python functions to every importer) and the
# matmul core split's loop counters C integers (each counts up to the SoC's core count; `_conv_split`
# holds generator expressions, which a cpdef function cannot). Every other
# value stays a Python object, so no arithmetic can wrap where Python's integers would not.
import cython

cpdef object _align(object x, object a)
cpdef object _cdiv(object a, object b)

@cython.locals(b_dim=cython.Py_ssize_t, m_dim=cython.Py_ssize_t)
cpdef object _core_split(object cores, object batch, object m_blk, object n_blk, object bm=*, object bn=*)
