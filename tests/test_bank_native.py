"""The bank's native first-lookup pass (`aoe._sim.bank_scan`) and query packing (`bank_pack`) against
the Python rules they stand in for.

The native pass may only ever accept a line the Python path accepts, and then must give the very case
the Python path gives: the same id and packed key, and knowledge / aoe objects equal to orjson's parse
with the same types and member order. Every other line is left to the Python path (None), which
decides it. These tests check that implication on well-formed records of every family, on thousands
of mutations of them (bank files are untrusted input), on number edge cases, and at the bank level
with the native pass switched off."""
import gc
import json
import os
import random
import warnings
import zlib

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aoe import _sim
from aoe.bank import BankWarning, OpBank, make_pending, opfile, store
from aoe.bank.opfile import Entry, native_checker, record_checker
from aoe.bank.schema import IMPL_NAMES, KNOWLEDGE_MAX, MATMUL_KEY, BankKeyError, schema_for
from conftest import mm_key

SOC = "Ascend910B2"
OPS = ("MatMulV3", "Conv2D", "Add", "LayerNorm", "Cast")
SPECS = {op: native_checker(op, schema_for(op)) for op in OPS}


def typed(v):
    """A value with every type and member order spelt out (True != 1, 1.0 != 1, order counts)."""
    if type(v) is dict:
        return ("dict", [(k, typed(x)) for k, x in v.items()])
    if type(v) in (list, tuple):
        return (type(v).__name__, [typed(x) for x in v])
    return (type(v).__name__, repr(v))


def python_case(op, line):
    """The case the Python path caches for a line, or None when it finds the line damaged."""
    try:
        rec = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    k = record_checker(op, schema_for(op), zlib.crc32)(rec)
    if isinstance(k, str):
        return None
    return (k[1], k[0], rec.get("version", 1), rec["knowledge"], rec.get("aoe") or {}, line)


def agree(op, line):
    """The native verdict on `line`, after checking it against the Python path's."""
    c = _sim.bank_scan(SPECS[op], line)
    if c is not None:
        want = python_case(op, line)
        assert want is not None, line
        assert typed(c[:5]) == typed(want[:5]), line
        assert c[5] is line and not gc.is_tracked(c)
    return c


def key_of(op, rng):
    """A canonical key of `op` with random sizes."""
    fam = schema_for(op)
    if fam.family == "matmul":
        return fam.canonical_key(op, {"m": rng.randrange(1, 1 << 40), "k": rng.choice([0, 64, 4096]), "n": 128,
                                      "a_dtype": 1, "b_dtype": 1, "out_dtype": 0, "a_format": 2, "b_format": 29,
                                      "out_format": 2, "trans_b_flag": rng.randrange(2)})
    if fam.family == "conv":
        return fam.canonical_key(op, {"a_dtype": 1, "b_dtype": 1, "c_dtype": 1, "a_shape_n": rng.randrange(1, 64),
                                      "a_shape_c": 64, "a_shape_h": 56, "a_shape_w": 56, "b_shape_n": 64,
                                      "b_shape_c": 64, "b_shape_h": 3, "b_shape_w": 3, "c_shape_h": 56,
                                      "c_shape_w": 56, "a_format": 3, "b_format": 4, "c_format": 3})
    attrs = {"LayerNorm": {"begin_norm_axis": -1, "epsilon": rng.choice([1e-5, 1e-12, 0.5])},
             "Cast": {"dst_type": rng.randrange(3), "truncate": rng.choice([True, False]), "name": "c\u00e9"}}
    n = 2 if op == "Add" else 1
    return fam.canonical_key(op, {"input_shapes": [[rng.randrange(-1, 9), 768]] * n, "input_dtypes": [1] * n,
                                  "input_formats": [2] * n, "output_dtypes": [1], "output_formats": [2],
                                  "attrs": attrs.get(op, {})})


def record_of(op, rng, extras=False):
    """A record as aoe writes it (optionally with extra knowledge and aoe fields of every JSON kind)."""
    key = key_of(op, rng)
    know = {f: rng.choice([0, 1, 255, 256, 70000, KNOWLEDGE_MAX]) for f in schema_for(op).knowledge_fields}
    aoe = {"perf_us": rng.uniform(1e-3, 1e6), "default_perf_us": rng.choice([600.0, 3, None])}
    if extras:
        # the extra field the native pass decides itself: a MatMul/Conv kernel name (issue 27: every extra
        # field is checked; the others, formats and kernel, take the Python path: see below)
        if schema_for(op).family != "vector":
            know["impl"] = rng.choice(sorted(IMPL_NAMES))
        aoe = {"soc": SOC, "kinds": ["Format", "Schedule"], "budget": 20000, "ok": True, "note": None, **aoe}
        if rng.random() < 0.5:  # CANN's own order of the knowledge fields, say
            know = dict(reversed(list(know.items())))
    return {"id": zlib.crc32(schema_for(op).pack(op, key)), "op": op, "version": 1, "info_dict": key,
            "knowledge": know, "aoe": aoe}


def test_aoe_records_of_every_family_are_accepted_with_the_python_case():
    rng = random.Random(1)
    for op in OPS:
        for i in range(200):
            rec = record_of(op, rng, extras=i % 2 == 1)
            line = orjson.dumps(rec)
            plain = op != "Cast"  # (Cast's attrs hold a non-ASCII name: the Python path's)
            c = agree(op, line)
            assert (c is not None) == plain, line
            # what a save writes reads back through the native pass too
    bank_line = orjson.dumps({"id": 1, "op": "MatMulV3", "version": 1, "info_dict": mm_key(),
                              "knowledge": {f: 1 for f in schema_for("MatMulV3").knowledge_fields},
                              "aoe": {"perf_us": 2.0}})
    assert agree("MatMulV3", bank_line) is not None


def test_other_extra_knowledge_fields_are_left_to_the_python_check():
    rng = random.Random(2)
    good = [{"formats": ["ND", "FRACTAL_NZ", "ND"]}, {"kernel": {"op": "MatMul", "strategy": {"baseM": 16}}}]
    bad = [{"impl": "../../x"}, {"impl": 7}, {"formats": ["../etc"]}, {"kernel": {"op": "MatMul", "strategy": {"x": 1.5}}},
           {"surprise": 1}]
    for op in ("MatMulV3", "Conv2D"):
        for extra, ok in [(e, True) for e in good] + [(e, False) for e in bad]:
            rec = record_of(op, rng)
            rec["knowledge"].update(extra)
            line = orjson.dumps(rec)
            assert _sim.bank_scan(SPECS[op], line) is None, line  # not the native pass's to decide
            assert (python_case(op, line) is not None) == ok, line


def _mutations(line, rng):
    """Ways a hostile or damaged file can differ from a good line, a byte or a token at a time."""
    s = line.decode()
    out = []
    for _ in range(12):
        i = rng.randrange(len(line))
        out.append(line[:i] + line[i + 1:])  # a byte dropped
        out.append(line[:i] + bytes([rng.randrange(256)]) + line[i + 1:])  # a byte replaced
        out.append(line[:i] + rng.choice([b" ", b"\\", b'"', b"-", b"0", b"9", b".", b"e", b",", b"}", b"]",
                                          b"{", b"[", b":", b"\xff", b"\xc3\xa9"]) + line[i:])  # a byte inserted
    toks = [(m.start(), m.end()) for m in __import__("re").finditer(r"-?[0-9][0-9.eE+-]*", s)]
    for a, b in rng.sample(toks, min(8, len(toks))):
        for rep in ("-0", "0", "-1", "1.0", "1e3", "true", "null", "00", "01", str(KNOWLEDGE_MAX + 1),
                    str(1 << 63), str(1 << 64), "1" * 19, "1" * 25, "1e400", "1e-400", "2.5E+3", '"7"', "-0.0",
                    str(0xFFFFFFFF + 1), "1e12", "1000000000000.0001", "999999999999.99999"):
            out.append((s[:a] + rep + s[b:]).encode())
    names = [(m.start(), m.end()) for m in __import__("re").finditer(r'"[A-Za-z_0-9]+":', s)]
    for a, b in rng.sample(names, min(6, len(names))):
        name = s[a:b]
        out.append((s[:a] + name + "1," + s[a:]).encode())  # the member given twice, the first one 1
        out.append((s[:b] + s[b:].replace(",", "," + name + "-3,", 1)).encode())  # twice, the last one -3
        out.append((s[:a] + '"\\u0041' + s[a + 1:]).encode())  # an escape in the name
        out.append((s[:a] + s[b:].split(",", 1)[-1]).encode() if "," in s[b:] else line)  # the member dropped
        out.append((s[:a] + '"x' + s[a + 1:]).encode())  # renamed
    out += [line + b" ", b" " + line, line + b"\n", line.replace(b":", b": ", 1), line[:-1],
            line.replace(b'"aoe":{', b'"aoe":{"perf_us":1,'), line.replace(b"{", b'{"id":1,', 1),
            line.replace(b'"op":"', b'"op":"X'), line.replace(b"[", b"[" * 40, 1) + b"]" * 39]
    return out


def test_mutated_lines_are_accepted_only_as_the_python_path_accepts_them():
    rng = random.Random(7)
    accepted = rejected = 0
    for op in OPS:
        for i in range(25):
            for bad in _mutations(orjson.dumps(record_of(op, rng, extras=i % 3 == 0)), rng):
                if agree(op, bad) is None:
                    rejected += 1
                else:
                    accepted += 1
    assert accepted > 500 and rejected > 5000  # (both sides exercised)


NUMBER = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.floats(min_value=1e-300, max_value=1e13).map(lambda f: f"{f:.25g}"),
    st.integers(-(1 << 70), 1 << 70).map(str),
    st.tuples(st.integers(0, 10 ** 20), st.integers(0, 10 ** 20), st.integers(-330, 330)).map(
        lambda t: f"{t[0]}.{t[1]}e{t[2]}"),
    st.sampled_from(["0", "-0", "0.0", "-0.0", "1e12", "1E12", "1e+12", "1000000000000", "1000000000001",
                     "4.9e-324", "2.2250738585072014e-308", "1.7976931348623157e308", "9007199254740993",
                     "0.1", "123456789012345678", "1234567890123456789", "00.5", ".5", "5.", "+5", "1e", "--1"]),
)


@settings(max_examples=1500, deadline=None)
@given(perf=NUMBER, default=NUMBER, extra=NUMBER)
def test_numbers_read_natively_are_orjson_s(perf, default, extra):
    rec = record_of("MatMulV3", random.Random(0))
    head = orjson.dumps({k: v for k, v in rec.items() if k != "aoe"})[:-1]
    line = head + f',"aoe":{{"x":{extra},"perf_us":{perf},"default_perf_us":{default}}}}}'.encode()
    agree("MatMulV3", line)
    agree("MatMulV3", head + f',"aoe":{{"perf_us":{perf}}}}}'.encode())


@settings(max_examples=400, deadline=None)
@given(value=st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-(1 << 66), 1 << 66), st.floats(),
                                    st.text(max_size=4)),
                          lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=3), c,
                                                                                         max_size=3)),
                          max_leaves=8))
def test_extra_fields_of_any_json_are_read_as_orjson_reads_them(value):
    rec = record_of("Conv2D", random.Random(1))
    rec["knowledge"]["extra"] = value
    rec["aoe"]["extra"] = value
    try:
        line = orjson.dumps(rec)
    except TypeError:
        return  # (NaN and friends become null in orjson: nothing new) / ints orjson cannot write
    agree("Conv2D", line)
    agree("Conv2D", json.dumps(rec, separators=(",", ":"), ensure_ascii=True).encode())


def test_knowledge_and_key_limits():
    rng = random.Random(2)
    rec = record_of("MatMulV3", rng)
    f = next(iter(rec["knowledge"]))
    for v, ok in ((KNOWLEDGE_MAX, True), (KNOWLEDGE_MAX + 1, False), (0, True), (-1, False)):
        c = agree("MatMulV3", orjson.dumps({**rec, "knowledge": {**rec["knowledge"], f: v}}))
        assert (c is not None) == ok and (python_case("MatMulV3", orjson.dumps(
            {**rec, "knowledge": {**rec["knowledge"], f: v}})) is not None) == ok
    for v in ((1 << 63) - 1, 0, 10 ** 18):
        key = {**rec["info_dict"], "m": v}
        line = orjson.dumps({**rec, "info_dict": key, "id": zlib.crc32(schema_for("MatMulV3").pack("MatMulV3", key))})
        assert agree("MatMulV3", line) is not None
    for perf, ok in ((1e12, True), (1e-300, True), (0.0, False), (-1.0, False), (1, True), (10 ** 12, True),
                     (10 ** 12 + 1, False), (None, True)):
        line = orjson.dumps({**rec, "aoe": {"perf_us": perf}})
        assert (agree("MatMulV3", line) is not None) == ok, perf
        assert (python_case("MatMulV3", line) is not None) == ok, perf
    # a repeated member is the Python path's to decide (orjson keeps the last), in every object
    for before, after in ((b'"version":1', b'"version":1,"version":1'), (b'"m":', b'"m":1,"m":'),
                          (b'"usedCoreNum":', b'"usedCoreNum":1,"usedCoreNum":'),
                          (b'"perf_us":', b'"perf_us":1,"perf_us":')):
        line = orjson.dumps(rec).replace(before, after, 1)
        assert line != orjson.dumps(rec) and _sim.bank_scan(SPECS["MatMulV3"], line) is None


def test_attrs_are_packed_by_the_python_packer_and_cached_by_their_text():
    rng = random.Random(3)
    rec = record_of("LayerNorm", rng)
    for attrs in ({"epsilon": 1e-5}, {"epsilon": 0.00001}, {"b": [1, {"c": None}], "a": "x"}, {"n": 1},
                  {"n": 1.0}, {"n": True}, {"big": 1 << 62}):
        key = {**rec["info_dict"], "attrs": attrs}
        text = orjson.dumps(key)
        for line in (orjson.dumps({**rec, "info_dict": key}),
                     orjson.dumps(rec).replace(orjson.dumps(rec["info_dict"]), text.replace(b"1e-5", b"1E-05"))):
            c = agree("LayerNorm", line)
            if c is not None:
                assert c[0] == schema_for("LayerNorm").pack("LayerNorm", orjson.loads(line)["info_dict"])


def _pack_or_error(op, key):
    try:
        return schema_for(op).pack(op, key)
    except BankKeyError:
        return BankKeyError


KEY_VALUE = st.one_of(st.integers(0, 1 << 40), st.integers(-(1 << 64), 1 << 64), st.booleans(),
                      st.just(np.int64(5)), st.just(1.0), st.just("1"), st.none())


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_native_query_packing_is_schema_pack(data):
    rng = random.Random(data.draw(st.integers(0, 99)))
    op = data.draw(st.sampled_from(OPS))
    key = key_of(op, rng)
    how = data.draw(st.sampled_from(["as is", "shuffled", "value", "drop", "extra", "subclass", "nested"]))
    if how == "shuffled":
        items = list(key.items())
        rng.shuffle(items)
        key = dict(items)
    elif how == "value":
        f = data.draw(st.sampled_from(sorted(key)))
        key[f] = data.draw(KEY_VALUE)
    elif how == "drop":
        del key[data.draw(st.sampled_from(sorted(key)))]
    elif how == "extra":
        key["zz"] = 1
    elif how == "subclass":
        key = type("D", (dict,), {})(key)
    elif how == "nested" and "input_shapes" in key:
        key["input_shapes"] = data.draw(st.sampled_from([[(1, 2)], [[True, 2]], [[1 << 63]], [[-(1 << 63)]], [],
                                                          "ab", [[np.int64(3)]]]))
        key["op_type"] = data.draw(st.sampled_from(["Add", "\ud800x", "\u00e9", 5]))
    got = _sim.bank_pack(SPECS[op], key)
    want = _pack_or_error(op, key)
    if got is not None:
        assert got == want, key


def test_a_query_is_packed_natively_when_exact():
    for op in OPS:
        key = key_of(op, random.Random(4))
        assert _sim.bank_pack(SPECS[op], key) == schema_for(op).pack(op, key)
    key = mm_key()
    key["trans_a_flag"] = True  # struct packs a bool as 1: so does the native packer
    assert _sim.bank_pack(SPECS["MatMulV3"], key) == schema_for("MatMulV3").pack("MatMulV3", key)
    assert _sim.bank_pack(SPECS["MatMulV3"], {**mm_key(), "m": np.int64(3)}) is None  # the Python packer's


def test_unchanged_compares_the_held_descriptor_with_the_signature(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x\n")
    fd = os.open(path, os.O_RDONLY)
    try:
        st_ = os.fstat(fd)
        sig = (st_.st_mtime_ns, st_.st_size, st_.st_ino)
        assert _sim.bank_unchanged(fd, sig) is True
        assert _sim.bank_unchanged(fd, (sig[0], sig[1] + 1, sig[2])) is False
        assert _sim.bank_unchanged(fd, (sig[0], sig[1], 1 << 80)) is False
        with open(path, "ab") as f:
            f.write(b"y\n")
        assert _sim.bank_unchanged(fd, sig) is False
        st_ = os.fstat(fd)
        sig = (st_.st_mtime_ns, st_.st_size, st_.st_ino)
        assert _sim.bank_unchanged(fd, sig) is True
        other = tmp_path / "g"
        other.write_bytes(b"z\n")
        os.replace(other, path)  # a compaction: the held file has no link left
        assert _sim.bank_unchanged(fd, sig) is False
    finally:
        os.close(fd)
    assert _sim.bank_unchanged(fd, sig) is False  # a closed descriptor
    with pytest.raises(TypeError):
        _sim.bank_unchanged(fd, [1, 2, 3])


def test_the_bank_answers_the_same_without_the_native_pass(tmp_path, monkeypatch):
    rng = random.Random(5)
    for op in ("MatMulV3", "LayerNorm"):
        lines = []
        for i in range(60):
            good = orjson.dumps(record_of(op, rng, extras=i % 2 == 0))
            lines.append(good)
            lines += rng.sample([m for m in _mutations(good, rng) if b"\n" not in m and m.strip()], 3)
        (tmp_path / op).mkdir()
        bank = OpBank(tmp_path / op, SOC)
        bank.dir.mkdir(parents=True)
        bank.path_for(op).write_bytes(b"\n".join(lines) + b"\n")
        keys = [orjson.loads(x)["info_dict"] for x in lines if python_case(op, x) is not None]
        answers = []
        for native in (True, False):
            with monkeypatch.context() as m:
                if not native:  # every line the Python check's, every lookup the Python path's
                    m.setattr(opfile, "_scan", lambda spec, line, *query: None)
                    m.setattr(store, "_probe", lambda *args: None)
                with warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter("always")
                    b = OpBank(tmp_path / op, SOC)
                    got = [typed(e.record()) if (e := b.lookup(op, k)) is not None else None for k in keys]
                    got += [typed((e.record(), e.knowledge, e.aoe, e.perf_us)) for e in b.entries(op)]
                    got.append(sorted(b.checked(op).lines.problems))
                    got.append(b.duplicates(op))
                answers.append((got, sorted(str(x.message) for x in w if issubclass(x.category, BankWarning))))
        assert answers[0] == answers[1]
        assert answers[0][0][-2]  # (damaged lines among them)


def test_cached_cases_are_kept_out_of_the_cyclic_gc_and_stay_valid(tmp_path):
    bank = OpBank(tmp_path, SOC)
    keys = [mm_key(m=16 * (i + 1)) for i in range(50)]
    bank.save([make_pending("MatMulV3", k, {f: i for f in schema_for("MatMulV3").knowledge_fields}, 1.0 + i)
               for i, k in enumerate(keys)])
    fresh = OpBank(tmp_path, SOC)
    entries = [fresh.lookup("MatMulV3", k) for k in keys]
    assert all(not gc.is_tracked(e._c) for e in entries)
    del entries
    gc.collect()
    for i, k in enumerate(keys):
        e = fresh.lookup("MatMulV3", k)
        assert e.perf_us == 1.0 + i and e.knowledge["baseM"] == i and e.info_dict == k
    # an Entry built by a caller from its own record keeps an ordinary (tracked) tuple
    own = Entry("MatMulV3", "custom", {"id": 1, "knowledge": {"x": [1]}, "aoe": {}}, b"{}")
    assert gc.is_tracked(own._c)


def test_spec_rejects_what_is_not_a_line():
    with pytest.raises(TypeError):
        _sim.bank_scan(SPECS["Add"], "a str")
    with pytest.raises(TypeError):
        _sim.bank_scan(object(), b"{}")
    assert _sim.bank_scan(SPECS["Add"], b"") is None
    assert all(_sim.bank_scan(SPECS["Add"], orjson.dumps(record_of("MatMulV3", random.Random(6)))[:n]) is None
               for n in range(0, 400, 7))
    assert MATMUL_KEY  # (the registry the specs were built from)


def test_first_lookups_of_appended_lines_collisions_and_friendly_keys(tmp_path):
    op = "MatMulV3"
    writer = OpBank(tmp_path, SOC)
    keys = [mm_key(m=16 * (i + 1)) for i in range(6)]
    writer.save([make_pending(op, k, {f: i for f in schema_for(op).knowledge_fields}, 10.0) for i, k in enumerate(keys[:3])])
    reader = OpBank(tmp_path, SOC)
    assert reader.lookup(op, keys[0]).knowledge["baseM"] == 0  # resolved by the native call
    writer.save([make_pending(op, k, {f: 7 for f in schema_for(op).knowledge_fields}, 5.0) for k in keys[3:]])
    # lines appended since the load (outside the lines read in one go): the Python fast path's
    assert [reader.lookup(op, k).knowledge["baseM"] for k in keys] == [0, 1, 2, 7, 7, 7]
    friendly = {**keys[1], "a_dtype": "DT_FLOAT16"}  # not exact: the Python packer, the same case
    assert OpBank(tmp_path, SOC).lookup(op, friendly).knowledge["baseM"] == 1
    # every id the same (a forced collision): one case per key, none answering for another
    coll = OpBank(tmp_path / "c", SOC, hash_fn=lambda b: 7)
    coll.save([make_pending(op, k, {f: i for f in schema_for(op).knowledge_fields}, 1.0) for i, k in enumerate(keys)])
    fresh = OpBank(tmp_path / "c", SOC, hash_fn=lambda b: 7)
    assert [fresh.lookup(op, k).knowledge["baseM"] for k in reversed(keys)] == [5, 4, 3, 2, 1, 0]
    assert fresh.lookup(op, mm_key(m=9999)) is None
