"""The bank decision rule: REPEAT_TUNE, the four outcomes (add, update, reserved, unsatisfied), counters that add up."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aoe.bank import BankChain, OpBank, decide, make_pending
from aoe.bank.decision import repeat_tune, should_tune
from aoe.tuning import Counters, Outcome
from aoe.errors import AoeError

PERF = st.one_of(st.none(), st.floats(min_value=0.001, max_value=1e6))


def test_the_table():
    # in a bank, REPEAT_TUNE off: never tuned, reserved whatever a tuner could have found
    assert not should_tune(True, False)
    assert decide(True, False, 10.0, 1.0) is Outcome.RESERVED
    # in a bank, REPEAT_TUNE on: tuned; update only when strictly better
    assert should_tune(True, True)
    assert decide(True, True, 10.0, 9.0) is Outcome.UPDATE
    assert decide(True, True, 10.0, 10.0) is Outcome.RESERVED
    assert decide(True, True, 10.0, 11.0) is Outcome.RESERVED
    assert decide(True, True, 10.0, None) is Outcome.RESERVED  # tuning failed
    assert decide(True, True, None, 5.0) is Outcome.UPDATE  # bank perf unknown (a CANN record)
    # not in a bank: tuned against the default strategy
    assert should_tune(False, False) and should_tune(False, True)
    assert decide(False, False, 10.0, 9.0) is Outcome.ADD
    assert decide(False, True, 10.0, 10.0) is Outcome.UNSATISFIED
    assert decide(False, False, 10.0, None) is Outcome.UNSATISFIED
    # a required margin
    assert decide(False, False, 10.0, 9.9, min_gain=0.05) is Outcome.UNSATISFIED
    assert decide(False, False, 10.0, 9.0, min_gain=0.05) is Outcome.ADD
    assert [o.writes for o in Outcome] == [True, True, False, False]
    assert [o.hit for o in Outcome] == [False, True, True, False]


@pytest.mark.parametrize("value,expected", [(None, False), ("", False), ("False", False), ("True", True),
                                            ("true", True), ("FALSE", False),
                                            (" True", True), ("false\n", False)])  # blanks: one rule (issue 27)
def test_repeat_tune_env(value, expected):
    env = {} if value is None else {"REPEAT_TUNE": value}
    assert repeat_tune(env) is expected


@pytest.mark.parametrize("value", ["1", "yes", "on", "Tru", "\u00a0True"])
def test_repeat_tune_rejects_other_values(value):
    with pytest.raises(AoeError, match="REPEAT_TUNE"):
        repeat_tune({"REPEAT_TUNE": value})


@settings(deadline=None)  # timing varies on shared CI machines
@given(cases=st.lists(st.tuples(st.booleans(), st.booleans(), PERF, PERF), max_size=60))
def test_counters_always_add_up(cases):
    c = Counters()
    for in_bank, repeat, in_use, tuned in cases:
        out = decide(in_bank, repeat, in_use, tuned)
        assert out.hit == in_bank
        if out.writes:
            assert tuned is not None and (in_use is None or tuned < in_use)
        c.record(out)
    d = c.to_dict()
    assert list(d) == ["repo_add_num", "repo_hit_num", "repo_reserved_num", "repo_unsatisfied_num",
                       "repo_update_num", "total_num"]
    assert d["repo_hit_num"] == d["repo_update_num"] + d["repo_reserved_num"]
    assert d["total_num"] == d["repo_add_num"] + d["repo_hit_num"] + d["repo_unsatisfied_num"] == len(cases)
    assert d["repo_hit_num"] == sum(1 for x in cases if x[0])
    assert c.consistent() and (c + c).consistent() and (c + c).total_num == 2 * len(cases)


def test_a_tuning_run_over_a_real_bank(tmp_path):
    """Drive the rule the way a tuner does: lookup in the chain, decide, write, count."""
    from aoe.bank.schema import MATMUL_KNOWLEDGE
    soc = "Ascend910B2"
    know = {f: 1 for f in MATMUL_KNOWLEDGE}
    builtin = OpBank(tmp_path / "builtin", soc)
    builtin.save([make_pending("MatMulV3", {"m": 1, "k": 1, "n": 1, "a_dtype": 1, "b_dtype": 1, "out_dtype": 1,
                             "a_format": 2, "b_format": 2, "out_format": 2}, know, 50.0)])[0]
    builtin.readonly = True
    custom = OpBank(tmp_path / "custom", soc)
    chain = BankChain(custom, builtin)

    def key(m):
        return {"m": m, "k": 1, "n": 1, "a_dtype": 1, "b_dtype": 1, "out_dtype": 1, "a_format": 2,
                "b_format": 2, "out_format": 2}

    # (m, default perf, tuned perf): m=1 is in the built-in bank at 50 us
    cases = [(1, 80.0, 40.0), (2, 80.0, 40.0), (3, 80.0, 90.0), (4, 80.0, None)]

    def run(repeat):
        c = Counters()
        for m, default, tuned in cases:
            e = chain.lookup("MatMulV3", key(m))
            in_use = e.perf_us if e is not None else default
            t = tuned if should_tune(e is not None, repeat) else None
            out = decide(e is not None, repeat, in_use, t)
            if out.writes:
                custom.save([make_pending("MatMulV3", key(m), {**know, "baseM": m}, t, default)])[0]
            c.record(out)
        return c.to_dict()

    first = run(False)
    assert first == {"repo_add_num": 1, "repo_hit_num": 1, "repo_reserved_num": 1,
                     "repo_unsatisfied_num": 2, "repo_update_num": 0, "total_num": 4}
    second = run(False)  # m=2 is now a custom hit
    assert second["repo_hit_num"] == 2 and second["repo_add_num"] == 0
    third = run(True)  # re-tune: the built-in case improves (update into the custom bank)
    assert third["repo_update_num"] == 1 and third["repo_reserved_num"] == 1
    e = chain.lookup("MatMulV3", key(1))
    assert e.source == "custom" and e.perf_us == 40.0
