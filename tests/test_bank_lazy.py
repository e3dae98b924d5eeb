"""The lazily built index of an operator bank file: aoe's lines are filed by id on load and parsed and
checked when their id is first needed. Lookups, damage reports, duplicate counts and compaction must
be what the full load gave: the reference below is that algorithm (every line parsed and checked in
file order, the last line of a case wins, compaction puts it at the case's first place)."""
import json
import random
import threading
import warnings
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aoe.bank import BankWarning, OpBank, make_pending
from aoe.bank.jsonl import MAX_WARNINGS_PER_FILE, loads
from aoe.bank.opfile import record_checker, shape_check
from aoe.bank.schema import MATMUL_KEY, MATMUL_KNOWLEDGE, VECTOR_KNOWLEDGE, BankKeyError, schema_for
from aoe.cli import main
from conftest import mm_key, mm_know

SOC, MM = "Ascend910B2", "MatMulV3"


def dumps(rec) -> bytes:
    """A record as aoe writes it: compact JSON, fields in insertion order."""
    return json.dumps(rec, separators=(",", ":")).encode()


def vec_key(n: int) -> dict:
    return {"op_type": "Add", "input_shapes": [[n, 8], [n, 8]], "input_dtypes": [1, 1], "input_formats": [2, 2],
            "output_dtypes": [1], "output_formats": [2], "attrs": {"n": n} if n % 2 else {}}


def vec_know(v: int) -> dict:
    return {f: v for f in VECTOR_KNOWLEDGE}


KEYS = {MM: [mm_key(m=16 * (i + 1)) for i in range(4)], "Add": [vec_key(i + 1) for i in range(4)]}
KNOW = {MM: mm_know, "Add": vec_know}


def line(op, hash_fn, kind, key_i=0, v=1, perf=5.0):
    """One line of a bank file of `op`: a usable record or one of the kinds of damage."""
    key = KEYS[op][key_i]
    h = hash_fn(schema_for(op).pack(op, key))
    know = KNOW[op](v)
    rec = {"id": h, "op": op, "version": 1, "info_dict": key, "knowledge": know, "aoe": {"perf_us": perf}}
    if kind == "good":
        return dumps(rec)
    if kind == "cann":  # CANN's own record: no "aoe", an id of CANN's hash (indexed under aoe's)
        return dumps({"id": 7, "op": op, "version": 1, "info_dict": key, "knowledge": know})
    if kind == "zero_perf":
        return dumps({**rec, "aoe": {"perf_us": 0}})
    if kind == "float_know":
        return dumps({**rec, "knowledge": {**know, list(know)[1]: 1e30}})
    if kind == "neg_know":
        return dumps({**rec, "knowledge": {**know, next(iter(know)): -4}})
    if kind == "wrong_id":  # a usable record under an id no lookup computes: its own case
        return dumps({**rec, "id": (h + 1) % (1 << 32)})
    if kind == "bad_json":  # aoe's layout, but not JSON: filed, found damaged when resolved
        return dumps(rec).replace(b'"version":1', b'"version":1,oops')
    if kind == "garbage":
        return b"{not json"
    if kind == "blank":
        return b""
    raise ValueError(kind)


def reference(data: bytes, op: str, hash_fn):
    """The full load: (cases {(id, packed): (first line, last line)}, records by line, damaged line
    numbers, canonical file bytes)."""
    shape, schema = shape_check(op), schema_for(op)
    rows = []  # (line number, raw, case or None)
    for n, raw in enumerate(data.split(b"\n")[:-1], 1):
        raw = raw.rstrip(b"\r")
        if not raw.strip():
            continue
        try:
            rec = loads(raw)
        except ValueError:
            rows.append((n, raw, None, None))
            continue
        why = shape(rec)
        if why is None:
            try:
                packed = schema.pack(op, rec["info_dict"])
                why = schema.record_problem(rec["info_dict"], rec["knowledge"])
            except BankKeyError as exc:
                why = str(exc)
        if why is not None:
            rows.append((n, raw, None, None))
            continue
        rows.append((n, raw, (rec["id"] if "aoe" in rec else hash_fn(packed), packed), rec))
    cases = {}
    for i, (_, _, k, _) in enumerate(rows):
        if k is not None:
            cases[k] = (cases[k][0] if k in cases else i, i)
    firsts = {f: k for k, (f, _) in cases.items()}
    out = []
    for i, (_, raw, k, _) in enumerate(rows):
        if i in firsts:
            out.append(rows[cases[firsts[i]][1]][1])
        elif k is None:
            out.append(raw)
    damaged = [n for n, _, k, _ in rows if k is None]
    return cases, rows, damaged, b"".join(r + b"\n" for r in out)


def _write(tmp_path, op, data: bytes):
    bank = OpBank(tmp_path, SOC)
    bank.dir.mkdir(parents=True, exist_ok=True)
    bank.path_for(op).write_bytes(data)
    return bank.path_for(op)


KINDS = ["good", "good", "good", "cann", "zero_perf", "float_know", "neg_know", "wrong_id", "bad_json",
         "garbage", "blank"]
HASHES = {"crc32": zlib.crc32, "crc32%3": lambda b: zlib.crc32(b) % 3}  # the second forces collisions


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(op=st.sampled_from([MM, "Add"]), hname=st.sampled_from(sorted(HASHES)),
       spec=st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 3), st.integers(0, 9),
                               st.floats(0.5, 100.0)), min_size=1, max_size=14),
       looked=st.sets(st.integers(0, 3)))
def test_lazy_index_answers_like_a_full_load(tmp_path_factory, op, hname, spec, looked):
    hash_fn = HASHES[hname]
    root = tmp_path_factory.mktemp("b")
    data = b"".join(line(op, hash_fn, kind, k, v, perf) + b"\n" for kind, k, v, perf in spec)
    path = _write(root, op, data)
    cases, rows, damaged, canonical = reference(data, op, hash_fn)
    schema = schema_for(op)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BankWarning)
        bank = OpBank(root, SOC, hash_fn=hash_fn)
        for k in sorted(looked):  # some ids resolved by lookups, the others still filed
            bank.lookup(op, KEYS[op][k])
        for k, key in enumerate(KEYS[op]):
            packed = schema.pack(op, key)
            want = cases.get((hash_fn(packed), packed))
            got = bank.lookup(op, key)
            if want is None:
                assert got is None, (k, got)
            else:
                assert got is not None and got.record() == rows[want[1]][3], k
        assert bank.duplicates(op) == sum(1 for _, _, c, _ in rows if c is not None) - len(cases)
        assert sorted(n for n, _ in bank.checked(op).lines.problems) == damaged
        # compaction (of a partly resolved index) writes what the full load's compaction wrote
        other = OpBank(root, SOC, hash_fn=hash_fn)
        for k in sorted(looked)[:1]:
            other.lookup(op, KEYS[op][k])
        dups = sum(1 for _, _, c, _ in rows if c is not None) - len(cases)
        assert other.compact() == {op: len(rows) - len(canonical.splitlines())} if dups else {op: 0}
        assert path.read_bytes() == (canonical if dups else data)  # (nothing superseded: not rewritten)
        # the carried-over index and a fresh load agree with the compacted file
        cases2, rows2, damaged2, _ = reference(path.read_bytes(), op, hash_fn)
        for b in (other, OpBank(root, SOC, hash_fn=hash_fn)):
            for key in KEYS[op]:
                packed = schema.pack(op, key)
                want = cases2.get((hash_fn(packed), packed))
                got = b.lookup(op, key)
                assert (got is None) == (want is None)
                if want is not None:
                    assert got.record() == rows2[want[1]][3]
            assert b.duplicates(op) == 0
            assert sorted(n for n, _ in b.checked(op).lines.problems) == damaged2


def test_a_damaged_line_is_found_when_its_id_is_first_needed(tmp_path):
    path = _write(tmp_path, MM, line(MM, zlib.crc32, "good", 0) + b"\n" + line(MM, zlib.crc32, "zero_perf", 1) + b"\n")
    bank = OpBank(tmp_path, SOC)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BankWarning)  # loading and the other case's lookup: no parse of line 2
        assert bank.lookup(MM, KEYS[MM][0]).knowledge == mm_know(1)
    with pytest.warns(BankWarning, match=f"{path}:2: 'aoe.perf_us' claims an impossible time 0"):
        assert bank.lookup(MM, KEYS[MM][1]) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", BankWarning)  # warned once, not at every lookup
        assert bank.lookup(MM, KEYS[MM][1]) is None
        # never the incumbent: a tuning write of that case is an addition
        assert bank.save([make_pending(MM, KEYS[MM][1], mm_know(3), 50.0)]) == ["added"]
    assert OpBank(tmp_path, SOC).lookup(MM, KEYS[MM][1]).knowledge == mm_know(3)
    assert [n for n, _ in OpBank(tmp_path, SOC).checked(MM).lines.problems] == [2]  # kept, still listed


def test_verify_lists_damage_no_lookup_touched(env, capsys):
    bank = OpBank(env / "bank" / SOC, SOC)
    path = _write(bank.root, MM, line(MM, zlib.crc32, "good", 0) + b"\n" + line(MM, zlib.crc32, "float_know", 1)
                  + b"\n" + line(MM, zlib.crc32, "bad_json", 2) + b"\n")
    rc = main(["bank", "verify"])
    out = capsys.readouterr().out
    assert rc == 1 and f"{path}:2:" in out and f"{path}:3: not valid JSON" in out


def test_a_damaged_later_line_never_replaces_the_winner(tmp_path):
    path = _write(tmp_path, MM, line(MM, zlib.crc32, "good", 0, v=1) + b"\n" + line(MM, zlib.crc32, "float_know", 0)
                  + b"\n" + line(MM, zlib.crc32, "neg_know", 0) + b"\n")
    bank = OpBank(tmp_path, SOC)
    with pytest.warns(BankWarning) as w:
        assert bank.lookup(MM, KEYS[MM][0]).knowledge == mm_know(1)
    assert {f"{path}:2:", f"{path}:3:"} <= {str(x.message).split(" ", 1)[0] for x in w}
    assert bank.duplicates(MM) == 0
    assert bank.compact() == {MM: 0}  # nothing superseded; the damaged lines stay
    assert len(path.read_bytes().splitlines()) == 3


def test_a_second_id_member_makes_a_filed_line_damaged(tmp_path):
    good = line(MM, zlib.crc32, "good", 0)
    twice = good.replace(b'"op":', b'"id":5,"op":', 1)  # starts with the right id, ends with id 5
    assert json.loads(twice)["id"] == 5
    path = _write(tmp_path, MM, twice + b"\n")
    bank = OpBank(tmp_path, SOC)
    with pytest.warns(BankWarning, match=f"{path}:1: its 'id' member is given twice"):
        assert bank.lookup(MM, KEYS[MM][0]) is None
    assert [n for n, _ in bank.checked(MM).lines.problems] == [1]


def test_lines_appended_after_the_load_are_seen_whether_their_id_was_resolved_or_not(tmp_path):
    writer = OpBank(tmp_path, SOC)
    writer.save([make_pending(MM, KEYS[MM][i], mm_know(i), 10.0) for i in range(3)])
    reader = OpBank(tmp_path, SOC)
    assert reader.lookup(MM, KEYS[MM][0]).perf_us == 10.0  # id 0 resolved; ids 1 and 2 still filed
    writer.save([make_pending(MM, KEYS[MM][0], mm_know(7), 5.0)])  # a resolved id: indexed at once
    writer.save([make_pending(MM, KEYS[MM][1], mm_know(8), 5.0)])  # a filed id: now two lines under it
    writer.save([make_pending(MM, KEYS[MM][3], mm_know(9), 5.0)])  # a new case
    assert reader.lookup(MM, KEYS[MM][0]).knowledge == mm_know(7)
    assert reader.lookup(MM, KEYS[MM][1]).knowledge == mm_know(8)
    assert reader.lookup(MM, KEYS[MM][2]).knowledge == mm_know(2)
    assert reader.lookup(MM, KEYS[MM][3]).knowledge == mm_know(9)
    assert reader.duplicates(MM) == 2
    # the writer's own index, never reloaded, agrees
    assert writer.duplicates(MM) == 2 and writer.lookup(MM, KEYS[MM][1]).knowledge == mm_know(8)


def test_concurrent_first_lookups_from_threads_all_hit(tmp_path):
    keys = [mm_key(m=16 * (i + 1)) for i in range(3000)]
    OpBank(tmp_path, SOC).save([make_pending(MM, k, mm_know(i % 1000), 1.0) for i, k in enumerate(keys)])
    bank = OpBank(tmp_path, SOC)
    bad = []

    def run(seed):
        order = list(range(len(keys)))
        random.Random(seed).shuffle(order)
        for i in order:
            e = bank.lookup(MM, keys[i])
            if e is None or e.knowledge != mm_know(i % 1000):
                bad.append(i)

    threads = [threading.Thread(target=run, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []


def test_warnings_are_capped_per_file(tmp_path):
    n = MAX_WARNINGS_PER_FILE + 5
    keys = [mm_key(m=16 * (i + 1)) for i in range(n)]
    data = b"".join(dumps({"id": zlib.crc32(schema_for(MM).pack(MM, k)), "op": MM, "version": 1, "info_dict": k,
                           "knowledge": mm_know(1), "aoe": {"perf_us": 0}}) + b"\n" for k in keys)
    _write(tmp_path, MM, data)
    bank = OpBank(tmp_path, SOC)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for k in keys:
            assert bank.lookup(MM, k) is None
    msgs = [str(x.message) for x in w if issubclass(x.category, BankWarning)]
    assert len(msgs) == MAX_WARNINGS_PER_FILE + 1 and "aoe bank verify" in msgs[-1]
    assert len(bank.checked(MM).lines.problems) == n  # verify still sees every one


# ---- the record check's fast path agrees with the schema's precise rules -------------------------

VALUE = st.one_of(st.integers(-(1 << 65), 1 << 65), st.integers(0, (1 << 31) + 2), st.booleans(), st.none(),
                  st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=3),
                  st.lists(st.integers(0, 9), max_size=2))


@settings(max_examples=300, deadline=None)
@given(know=st.fixed_dictionaries({f: st.one_of(st.integers(0, 1 << 20), VALUE) for f in MATMUL_KNOWLEDGE}),
       drop=st.sets(st.sampled_from(MATMUL_KNOWLEDGE), max_size=1),
       key=st.fixed_dictionaries({f: st.one_of(st.integers(0, 1 << 20), st.integers(-9, -1), st.booleans(),
                                               st.just(1.5)) for f in MATMUL_KEY}),
       perf=st.one_of(st.none(), st.floats(allow_nan=False), st.integers(-2, 3), st.booleans()))
def test_record_check_agrees_with_the_precise_rules(know, drop, key, perf):
    for f in drop:
        del know[f]
    rec = {"id": 3, "op": MM, "version": 1, "info_dict": key, "knowledge": know}
    if perf is not None:
        rec["aoe"] = {"perf_us": perf}
    got = record_checker(MM, schema_for(MM), zlib.crc32)(rec)
    schema = schema_for(MM)
    why = shape_check(MM)(rec)
    if why is None:
        try:
            packed = schema.pack(MM, key)
            why = schema.record_problem(key, know)
        except BankKeyError as exc:
            why = str(exc)
    if why is None:
        assert got == ((3 if "aoe" in rec else zlib.crc32(packed)), packed)
    else:
        assert isinstance(got, str) and why in got


def test_bulk_lines_behave_like_a_list():
    from aoe.bank.jsonl import BulkLines
    ref = [b"a", b"b", b"c"]
    bl = BulkLines()
    bl += list(ref)  # the first read: the tuple
    assert type(bl.bulk) is tuple and bl.tail == []
    for x in (b"d", b"e"):
        bl.append(x)
        ref.append(x)
    bl += [b"f"]  # a later read: appended to the list
    ref.append(b"f")
    assert len(bl) == len(ref) and list(bl) == ref and bool(bl) and not BulkLines()
    for i in range(-len(ref), len(ref)):
        assert bl[i] == ref[i], i
    for a in range(-7, 8):
        for b in range(-7, 8):
            assert list(bl[a:b]) == ref[a:b], (a, b)
    assert list(bl[::2]) == ref[::2]
    with pytest.raises(IndexError):
        bl[len(ref)]
    with pytest.raises(IndexError):
        bl[-len(ref) - 1]


def test_crlf_and_blank_lines_keep_their_numbers(tmp_path):
    good = [line(MM, zlib.crc32, "good", k) for k in range(3)]
    bad = line(MM, zlib.crc32, "zero_perf", 3)
    path = _write(tmp_path, MM, good[0] + b"\r\n\r\n" + good[1] + b"\r\n   \n" + bad + b"\r\n" + good[2] + b"\n")
    bank = OpBank(tmp_path, SOC)
    for k in range(3):
        assert bank.lookup(MM, KEYS[MM][k]).knowledge == mm_know(1)
    with pytest.warns(BankWarning, match=f"{path}:5:"):
        assert bank.lookup(MM, KEYS[MM][3]) is None


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 9])
def test_a_compaction_writes_its_lines_in_pieces_that_make_the_whole_file(tmp_path, n):
    """`Lines.chunks` (what a compaction writes) joins to `content()` whatever the piece boundaries."""
    from aoe.bank.jsonl import BulkLines, Lines

    raw = [f'{{"i": {i}}}'.encode() for i in range(n)]
    for lines in (Lines(tmp_path / "f.json", list(raw)), Lines(tmp_path / "f.json", BulkLines(raw))):
        assert b"".join(lines.chunks(per=4)) == lines.content()
        assert all(c.endswith(b"\n") for c in lines.chunks(per=4))
