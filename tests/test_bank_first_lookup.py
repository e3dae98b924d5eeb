"""What a lookup costs, counted (not timed): a first lookup of a case stores nothing into the file's index
(the index files those cases when it is next read, with the same result), a lookup that finds its case
runs no Python function besides `OpBank.lookup` itself (the Entry is made natively, a query's attrs are
packed from the cache), and the attrs cache keeps values of different types apart."""
import random
import sys

import orjson

from aoe import _sim
from aoe.bank import OpBank, make_pending
from aoe.bank.opfile import native_checker
from aoe.bank.schema import schema_for
from conftest import mm_key

SOC = "Ascend910B2"


class CountingDict(dict):
    """A dict that counts the stores into it."""

    stores = 0

    def __setitem__(self, k, v):
        type(self).stores += 1
        super().__setitem__(k, v)


def ln_key(i):
    """A LayerNorm key (with attrs, so the query's attrs must be packed)."""
    return {"op_type": "LayerNorm", "input_shapes": [[i + 1, 768]], "input_dtypes": [1], "input_formats": [2],
            "output_dtypes": [1], "output_formats": [2], "attrs": {"begin_norm_axis": -1, "epsilon": 1e-5}}


def make_bank(tmp_path, n=40):
    bank = OpBank(tmp_path, SOC)
    keys = {"MatMulV3": [mm_key(m=16 * (i + 1)) for i in range(n)], "LayerNorm": [ln_key(i) for i in range(n)]}
    for op, ks in keys.items():
        know = {f: 1 for f in schema_for(op).knowledge_fields}
        bank.save([make_pending(op, k, know, 1.0 + i) for i, k in enumerate(ks)])
    return keys


def fresh_keys(ks):
    """The keys as a caller builds them: fresh objects."""
    return [orjson.loads(orjson.dumps(k)) for k in ks]


def test_a_first_lookup_stores_nothing_into_the_index(tmp_path):
    keys = make_bank(tmp_path)
    for op, ks in keys.items():
        want = OpBank(tmp_path, SOC).checked(op).index  # every line parsed and indexed the slow way
        bank = OpBank(tmp_path, SOC)
        f = bank.file(op)
        f.index = CountingDict()
        f.renew_fast()
        CountingDict.stores = 0
        got = [bank.lookup(op, k) for k in fresh_keys(ks)]
        assert all(e is not None and e.perf_us == 1.0 + i for i, e in enumerate(got))
        assert CountingDict.stores == 0, op  # (one store per first lookup before)
        assert dict(f.index) == want and list(f.index) == list(want)  # filed when read: the same index
        assert f.cases() == len(ks)
        # a save reads the index first: it finds the cases the lookups cached
        know = {x: 2 for x in schema_for(op).knowledge_fields}
        assert bank.save([make_pending(op, ks[3], know, 0.5)]) == ["replaced"]
        assert OpBank(tmp_path, SOC).lookup(op, ks[3]).perf_us == 0.5


def test_a_hit_runs_no_python_function_but_lookup(tmp_path):
    keys = make_bank(tmp_path)
    bank = OpBank(tmp_path, SOC)
    for op, ks in keys.items():
        bank.lookup(op, ks[0])  # the file's load and the attrs' first packing: Python, once
    own = OpBank.lookup.__code__
    calls = []

    def prof(frame, event, arg):
        if event == "call" and frame.f_code is not own:
            calls.append(frame.f_code.co_qualname)

    queries = [(op, k) for op, ks in keys.items() for k in fresh_keys(ks[1:])]
    first, again = [], []
    sys.setprofile(prof)
    try:
        for op, k in queries:  # (loops, not comprehensions: those are Python functions of their own)
            first.append(bank.lookup(op, k))
        for op, k in queries:
            again.append(bank.lookup(op, k))
    finally:
        sys.setprofile(None)
    assert all(e is not None for e in first + again)
    assert calls == []  # (before: entry_of for every hit, the attrs packer for every LayerNorm query)
    assert [e.record() for e in first] == [e.record() for e in again]


def test_query_attrs_of_different_types_are_packed_apart():
    spec = native_checker("LayerNorm", schema_for("LayerNorm"))
    pack = schema_for("LayerNorm").pack
    values = [1, True, 1.0, False, 0, 0.0, -0.0, None, "1", [1], [True], [1.0], {"x": 1}, {"x": 1.0},
              1 << 62, 1 << 70, 1e-5, 0.00001000000000001, "\u00e9", [[1, 2], {"y": None}]]
    rng = random.Random(7)
    for _ in range(3):  # again and again: the second time from the cache
        rng.shuffle(values)
        for v in values:
            for attrs in ({"a": v}, {"a": v, "b": 2}, {"b": 2, "a": v}):
                key = {**ln_key(0), "attrs": attrs}
                assert _sim.bank_pack(spec, key) == pack("LayerNorm", key), attrs


def test_a_line_s_attrs_text_found_in_the_cache_is_its_packed_attrs():
    # the second scan of each line finds its attrs text in the cache, delimited by brackets and strings
    spec = native_checker("LayerNorm", schema_for("LayerNorm"))
    pack = schema_for("LayerNorm").pack
    know = {f: 1 for f in schema_for("LayerNorm").knowledge_fields}
    for attrs in ({"a": "}"}, {"a": "]", "b": [1, {"c": "{["}]}, {"x": [[], {}], "y": 1.5}, {"z": "a\\\"b"},
                  {"e": 1e-5}, {"e": 1}, {"e": True}):
        key = {**ln_key(0), "attrs": attrs}
        line = orjson.dumps({"id": 1, "op": "LayerNorm", "version": 1, "info_dict": key, "knowledge": know,
                             "aoe": {"perf_us": 1.0}})
        for _ in range(2):
            c = _sim.bank_scan(spec, line)
            assert c is None or c[0] == pack("LayerNorm", key), attrs
        trailing = line.replace(b'"attrs":' + orjson.dumps(attrs), b'"attrs":' + orjson.dumps(attrs) + b',"q":1')
        assert _sim.bank_scan(spec, trailing) is None  # (one member more in the key: not aoe's layout)


def test_natively_resolved_ids_leave_pending_as_the_python_path_leaves_them(tmp_path):
    keys = make_bank(tmp_path)
    for op, ks in keys.items():
        bank = OpBank(tmp_path, SOC)
        f = bank.file(op)
        assert f.fast[4] is not None  # the native table of the filed ids, made at load
        dict_path = OpBank(tmp_path, SOC)
        g = dict_path.file(op)
        g._ids = None  # no table: the native call reads the pending dict itself
        g.renew_fast()
        for b in (bank, dict_path):
            got = [b.lookup(op, k) for k in fresh_keys(ks[::2])]
            assert [e.perf_us for e in got] == [1.0 + i for i in range(0, len(ks), 2)]
        assert f._pending != g._pending  # (the table's ids are still in the dict until it is read)
        assert f.pending == g.pending and f.cases() == g.cases() == len(ks) and f.index == g.index
        assert f.dups_bound() == g.dups_bound() and f._pending == g._pending
        c = f.compacted()  # the compacted file's table is made from its dict
        assert c.fast[4] is not None and c.pending == f.pending
        assert [bank.lookup(op, k).perf_us for k in fresh_keys(ks)] == [1.0 + i for i in range(len(ks))]
        assert not f.pending and not f._pending


def test_an_id_filed_again_after_the_load_is_left_to_the_python_path(tmp_path):
    op = "MatMulV3"
    writer = OpBank(tmp_path, SOC)
    keys = [mm_key(m=16 * (i + 1)) for i in range(4)]
    know = {f: 1 for f in schema_for(op).knowledge_fields}
    writer.save([make_pending(op, k, know, 10.0) for k in keys])
    reader = OpBank(tmp_path, SOC)
    assert reader.lookup(op, keys[0]).perf_us == 10.0  # (loaded: the table holds every id)
    with open(writer.path_for(op), "ab") as fh:  # a second line of keys[1]'s id: the newer one wins
        fh.write(reader.file(op).lines.raw[1].replace(b'"perf_us":10.0', b'"perf_us":3.0'))
    assert reader.lookup(op, keys[1]).perf_us == 3.0
    assert [reader.lookup(op, k).perf_us for k in keys] == [10.0, 3.0, 10.0, 10.0]
    assert reader.file(op).dups == 1 and not reader.file(op).pending


def test_ids_the_native_table_cannot_hold_leave_the_lookup_to_the_dict():
    assert _sim.bank_ids_sync(None, {2**70: 1}, None) is None  # (an untrusted file's huge id)
    assert _sim.bank_ids_sync(None, {5: -1}, None) is None
    t = _sim.bank_ids_sync(None, {5: 1, 6: [2, 3]}, None)
    assert t is not None and _sim.bank_ids_sync(t, {5: 1, 7: 4}, [6, 7]) is t
    assert _sim.bank_ids_sync(t, {5: 1, 2**70: 4}, [2**70]) is None


def test_a_table_out_of_step_with_the_dict_answers_nothing(tmp_path):
    keys = make_bank(tmp_path, n=4)
    bank = OpBank(tmp_path, SOC)
    f = bank.file("MatMulV3")
    state = f.fast  # (what a lookup waiting for the lock still holds when another thread's sync fails)
    assert _sim.bank_ids_sync(state[4], {2**70: 1}, [2**70]) is None
    r = _sim.bank_probe(f.spec, -1, None, fresh_keys(keys["MatMulV3"])[0], bank.hash_fn, f.hits, state, bank._mutex)
    assert type(r) is tuple and len(r) == 2 and not f.hits  # left to the Python path, nothing resolved
    assert bank.lookup("MatMulV3", keys["MatMulV3"][0]).perf_us == 1.0
