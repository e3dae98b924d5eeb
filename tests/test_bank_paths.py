"""Bank locations (TUNE_BANK_PATH, else ASCEND_CACHE_PATH, else the home directory), their error cases,
untrusted names and shared-directory permissions."""
import os
import stat
from pathlib import Path

import pytest

from aoe.bank import OpBank, make_pending, resolve_op_bank_dir, resolve_subgraph_bank_dir
from aoe.bank.paths import BankNameError, check_dir, ensure_dir
from aoe.errors import AoeError

SOC = "Ascend910B2"


def test_priority_tune_bank_path_over_cache_over_default(tmp_path):
    tune, cache, home = tmp_path / "tune", tmp_path / "cache", tmp_path / "home"
    for d in (tune, cache, home):
        d.mkdir()
    env = {"TUNE_BANK_PATH": str(tune), "ASCEND_CACHE_PATH": str(cache), "HOME": str(home)}
    assert resolve_op_bank_dir(SOC, env) == tune / SOC
    assert resolve_subgraph_bank_dir(SOC, env) == tune
    del env["TUNE_BANK_PATH"]
    assert resolve_op_bank_dir(SOC, env) == cache / "aoe_data" / SOC
    assert resolve_subgraph_bank_dir(SOC, env) == cache / "aoe_data"
    del env["ASCEND_CACHE_PATH"]
    base = home / "Ascend" / "latest" / "data" / "aoe" / "custom"
    assert resolve_op_bank_dir(SOC, env) == base / "op" / SOC
    assert resolve_subgraph_bank_dir(SOC, env) == base / "graph" / SOC


def test_empty_variable_counts_as_unset(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {"TUNE_BANK_PATH": "", "ASCEND_CACHE_PATH": str(cache), "HOME": str(tmp_path)}
    assert resolve_op_bank_dir(SOC, env) == cache / "aoe_data" / SOC


def test_relative_tune_bank_path_is_relative_to_the_working_dir(tmp_path, monkeypatch):
    (tmp_path / "rel" / "bank").mkdir(parents=True)
    env = {"TUNE_BANK_PATH": "rel/bank", "HOME": str(tmp_path)}
    assert resolve_op_bank_dir(SOC, env, cwd=tmp_path) == tmp_path / "rel" / "bank" / SOC
    monkeypatch.chdir(tmp_path / "rel")
    with pytest.raises(AoeError, match="TUNE_BANK_PATH=rel/bank"):
        resolve_op_bank_dir(SOC, env)  # rel/rel/bank does not exist
    monkeypatch.chdir(tmp_path)
    assert resolve_op_bank_dir(SOC, env) == tmp_path / "rel" / "bank" / SOC


def test_missing_directory_names_path_and_variable(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(AoeError) as ei:
        resolve_op_bank_dir(SOC, {"TUNE_BANK_PATH": str(missing)})
    assert str(missing) in str(ei.value) and "TUNE_BANK_PATH" in str(ei.value)
    assert "does not exist" in str(ei.value)
    with pytest.raises(AoeError, match="ASCEND_CACHE_PATH"):
        resolve_subgraph_bank_dir(SOC, {"ASCEND_CACHE_PATH": str(missing)})


def test_a_file_is_not_a_bank_directory(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(AoeError, match="not a directory"):
        resolve_op_bank_dir(SOC, {"TUNE_BANK_PATH": str(f)})


@pytest.mark.parametrize("mode", [0o000, 0o500, 0o300, 0o600])
def test_directory_without_rwx_is_refused_even_as_root(tmp_path, mode):
    d = tmp_path / "bank"
    d.mkdir()
    os.chmod(d, mode)
    try:
        with pytest.raises(AoeError) as ei:
            resolve_op_bank_dir(SOC, {"TUNE_BANK_PATH": str(d)})
        msg = str(ei.value)
        assert str(d) in msg and "TUNE_BANK_PATH" in msg and "read, write and execute" in msg
    finally:
        os.chmod(d, 0o700)


def test_soc_subdirectory_without_permission_is_refused(tmp_path):
    (tmp_path / SOC).mkdir(mode=0o500)
    try:
        with pytest.raises(AoeError, match=SOC):
            resolve_op_bank_dir(SOC, {"TUNE_BANK_PATH": str(tmp_path)})
    finally:
        os.chmod(tmp_path / SOC, 0o700)


def test_rwx_directory_passes(tmp_path):
    check_dir(tmp_path, "test")


def test_default_location_is_created_on_first_write(tmp_path):
    env = {"HOME": str(tmp_path)}
    root = resolve_op_bank_dir(SOC, env)
    assert not root.exists()
    bank = OpBank(root, SOC)
    bank.save([make_pending("Relu", {"input_shapes": [[8]], "input_dtypes": [1], "input_formats": [2],
                      "output_dtypes": [1], "output_formats": [2]},
             {"blockDim": 1, "tileLen": 8, "doubleBuffer": 0, "impl": 0}, 1.0)])[0]
    assert (root / "unified_bank" / f"{SOC}_24_AiCore_Relu_runtime_kb.json").is_file()


def test_writing_into_a_read_only_bank_is_a_clear_error(tmp_path):
    bank = OpBank(tmp_path, SOC)
    bank.dir.mkdir()
    os.chmod(bank.dir, 0o500)
    try:
        with pytest.raises(AoeError, match="unified_bank"):
            bank.save([make_pending("Relu", {"input_shapes": [[8]]}, {"blockDim": 1, "tileLen": 8, "doubleBuffer": 0,
                                                       "impl": 0}, 1.0)])[0]
    finally:
        os.chmod(bank.dir, 0o700)


HOSTILE = ["../x", "..", "a/../../b", "/etc/passwd", "a/b", "a\\b", "x\0y", "A" * 129, "", " Add",
           "Add ", "1Add", "Add.json", "~root", "Add\n", "Ä", "$HOME", "Add;rm"]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_operator_types_never_leave_the_bank(tmp_path, name):
    root = tmp_path / "bank"
    root.mkdir()
    bank = OpBank(root, SOC)
    with pytest.raises(BankNameError):
        bank.save([make_pending(name, {}, {"blockDim": 1, "tileLen": 8, "doubleBuffer": 0, "impl": 0}, 1.0)])[0]
    with pytest.raises(BankNameError):
        bank.lookup(name, {})
    with pytest.raises(BankNameError):
        bank.path_for(name)
    # nothing at all was created anywhere under tmp_path except the bank root itself
    assert [p for p in tmp_path.rglob("*") if p != root] == []


@pytest.mark.parametrize("soc", HOSTILE)
def test_hostile_soc_names_are_refused(tmp_path, soc):
    with pytest.raises(AoeError):
        resolve_op_bank_dir(soc, {"TUNE_BANK_PATH": str(tmp_path)})
    with pytest.raises(AoeError):
        OpBank(tmp_path, soc, core_num=8)


def test_longest_allowed_name_works(tmp_path):
    name = "A" * 128
    bank = OpBank(tmp_path, SOC)
    assert bank.save([make_pending(name, {}, {"blockDim": 1, "tileLen": 8, "doubleBuffer": 0, "impl": 0}, 1.0)])[0] == "added"
    assert bank.lookup(name, {}) is not None


def test_symlinked_unified_bank_dir_pointing_outside_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "bank"
    root.mkdir()
    (root / "unified_bank").symlink_to(outside)
    bank = OpBank(root, SOC)
    with pytest.raises(AoeError, match="outside the bank directory"):
        bank.save([make_pending("Relu", {}, {"blockDim": 1, "tileLen": 8, "doubleBuffer": 0, "impl": 0}, 1.0)])[0]
    assert list(outside.iterdir()) == []


def test_symlinked_bank_file_is_not_followed(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text('{"not": "a bank"}\n')
    bank = OpBank(tmp_path / "bank", SOC)
    bank.dir.mkdir(parents=True)
    bank.path_for("Relu").symlink_to(secret)
    with pytest.raises(AoeError, match="symbolic link"):
        bank.lookup("Relu", {})
    with pytest.raises(AoeError, match="symbolic link"):
        bank.save([make_pending("Relu", {}, {"blockDim": 1, "tileLen": 8, "doubleBuffer": 0, "impl": 0}, 1.0)])[0]
    assert secret.read_text() == '{"not": "a bank"}\n'


def test_new_files_and_dirs_follow_the_shared_directory(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    gid = 4242 if os.geteuid() == 0 else os.getegid()
    if os.geteuid() == 0:
        os.chown(shared, -1, gid)
    os.chmod(shared, 0o2770)  # group-shared, setgid
    old = os.umask(0o077)  # a restrictive user umask must not lock the group out
    try:
        bank = OpBank(shared / SOC, SOC)
        bank.save([make_pending("Relu", {}, {"blockDim": 1, "tileLen": 8, "doubleBuffer": 0, "impl": 0}, 1.0)])[0]
    finally:
        os.umask(old)
    f = bank.path_for("Relu")
    for p, want in ((shared / SOC, 0o2770), (bank.dir, 0o2770), (f, 0o660)):
        st = os.stat(p)
        assert stat.S_IMODE(st.st_mode) == want, (p, oct(st.st_mode))
        assert st.st_gid == gid, p
    lock = f.with_name(f".{f.name}.lock")
    assert stat.S_IMODE(os.stat(lock).st_mode) == 0o660


def test_a_sticky_public_directory_is_not_copied(tmp_path):
    public = tmp_path / "public"
    public.mkdir()
    os.chmod(public, 0o1777)  # like /tmp
    old = os.umask(0o022)
    try:
        bank = OpBank(public / SOC, SOC)
        bank.save([make_pending("Relu", {}, {"blockDim": 1, "tileLen": 8, "doubleBuffer": 0, "impl": 0}, 1.0)])[0]
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(public / SOC).st_mode) == 0o755  # not world-writable
    assert stat.S_IMODE(os.stat(bank.path_for("Relu")).st_mode) & 0o022 == 0


def test_rewrite_keeps_an_existing_files_mode(tmp_path):
    bank = OpBank(tmp_path, SOC)
    know = {"blockDim": 1, "tileLen": 8, "doubleBuffer": 0, "impl": 0}
    bank.save([make_pending("Relu", {}, know, 2.0)])[0]
    os.chmod(bank.path_for("Relu"), 0o640)
    bank.save([make_pending("Relu", {}, know, 1.0)])[0]
    assert stat.S_IMODE(os.stat(bank.path_for("Relu")).st_mode) == 0o640


def test_ensure_dir_error_is_clear(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    try:
        if os.geteuid() == 0:
            pytest.skip("root can create directories in a 0500 directory; check_dir covers root")
        with pytest.raises(AoeError, match="cannot create bank directory"):
            ensure_dir(ro / "a" / "b")
    finally:
        os.chmod(ro, 0o700)


def test_paths_are_path_objects(tmp_path):
    assert isinstance(resolve_op_bank_dir(SOC, {"TUNE_BANK_PATH": str(tmp_path)}), Path)
