"""Where the banks live, directory checks, safe names and shared-directory permissions.

Permission rule: the user needs read, write and execute permission on a bank directory. For an
ordinary user that is `os.access`. root passes every `os.access` check, so for root the directory's
*owner* bits must also be rwx: a directory made read-only (`chmod 555`) or closed (`chmod 000`) is
refused for root too, as it is for its owner.
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Mapping

from ..errors import AoeError

# AI core counts of the simulated SoCs (the SoC files in aoe/soc/ are authoritative; this is the
# fallback so the bank works without them).
CORE_NUMS: dict[str, int] = {"Ascend910A": 32, "Ascend910B2": 24, "Ascend910B3": 20, "Ascend310P3": 8}

class BankNameError(AoeError):
    """An operator type or SoC name that cannot be used in a bank file name."""


# Names that come from model files or the command line and end up in file names.
_SAFE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")


def check_name(value: object, what: str) -> str:
    """Return `value` if it is a safe op-type/SoC name (letter first, then [A-Za-z0-9_], ≤128), else raise."""
    if not isinstance(value, str) or not _SAFE_NAME.fullmatch(value):
        shown = repr(value)[:80]
        raise BankNameError(f"invalid {what} {shown}: it must start with a letter and contain only letters, "
                       f"digits and '_' (at most 128 characters), so it can be used in a bank file name")
    return value


def core_num_for(soc: str, core_num: int | None = None) -> int:
    """Return `core_num` if given, else the AI core count of a known SoC."""
    if core_num is not None:
        if type(core_num) is not int or core_num <= 0:
            raise AoeError(f"core_num must be a positive integer, got {core_num!r}")
        return core_num
    try:
        return CORE_NUMS[soc]
    except KeyError:
        raise AoeError(f"unknown AI core count for SoC {soc!r}; pass core_num (known SoCs: "
                       f"{', '.join(CORE_NUMS)})") from None


def _owner_rwx_for_root(st: os.stat_result) -> bool:
    return (st.st_mode & stat.S_IRWXU) == stat.S_IRWXU


def rwx_ok(path: Path, st: os.stat_result) -> bool:
    """Read+write+execute for this user; for root (who passes every `os.access`) the owner bits too, so a
    `chmod 555` directory is refused for root as for its owner. The one rule of bank and lock directories."""
    ok = os.access(path, os.R_OK | os.W_OK | os.X_OK)
    if ok and os.geteuid() == 0:
        ok = _owner_rwx_for_root(st)
    return ok


def check_dir(path: Path, source: str) -> None:
    """Raise AoeError unless `path` is an existing directory with read+write+execute permission.

    `source` says where the path came from (e.g. "TUNE_BANK_PATH=/x") and is named in the message.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise AoeError(f"bank directory {path} does not exist (from {source}); create it "
                       f"(mkdir -p {path}) or use an existing directory") from None
    except OSError as exc:
        raise AoeError(f"bank directory {path} (from {source}) cannot be accessed: "
                       f"{exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise AoeError(f"bank path {path} (from {source}) is not a directory")
    if not rwx_ok(path, st):
        raise AoeError(f"bank directory {path} (from {source}) needs read, write and execute "
                       f"permission for the current user (mode {stat.filemode(st.st_mode)}); "
                       f"fix it with chmod u+rwx (or g+rwx for a shared bank) or choose another directory")


def _base(env: Mapping[str, str],
          cwd: str | os.PathLike[str] | None) -> tuple[Path, str, str] | None:
    """(base dir, source text, sub-directory) from TUNE_BANK_PATH / ASCEND_CACHE_PATH, else None."""
    for var, suffix in (("TUNE_BANK_PATH", ""), ("ASCEND_CACHE_PATH", "aoe_data")):
        value = env.get(var, "")
        if value:  # an empty variable counts as unset
            if "\0" in value:
                raise AoeError(f"{var} contains a NUL byte; set it to a directory path")
            p = Path(value)
            if not p.is_absolute():
                p = Path(cwd if cwd is not None else os.getcwd()) / p
            return p, f"{var}={value}", suffix
    return None


def _home(env: Mapping[str, str]) -> Path:
    home = env.get("HOME") or str(Path.home())
    return Path(home)


def _resolve(soc: str, kind: str, env: Mapping[str, str] | None,
             cwd: str | os.PathLike[str] | None, check: bool) -> Path:
    check_name(soc, "SoC version")
    env = os.environ if env is None else env
    found = _base(env, cwd)
    if found is not None:
        base, source, suffix = found
        if check:
            # the variable's own directory must exist: the spec says error and exit otherwise
            check_dir(base, source)
        root = base / suffix if suffix else base
        out = root / soc if kind == "op" else root
    else:
        source = "the default location $HOME/Ascend/latest/data/aoe/custom (TUNE_BANK_PATH and ASCEND_CACHE_PATH unset)"
        out = _home(env) / "Ascend" / "latest" / "data" / "aoe" / "custom" / kind / soc
    if check and out.exists():
        check_dir(out, source)
    return out


def resolve_op_bank_dir(soc: str, env: Mapping[str, str] | None = None,
                        cwd: str | os.PathLike[str] | None = None, check: bool = True) -> Path:
    """Operator bank directory: $TUNE_BANK_PATH/<soc> > $ASCEND_CACHE_PATH/aoe_data/<soc> > default.

    With `check`, the directory named by the variable must exist with rwx permission (AoeError
    otherwise); sub-directories below it are created on the first write.
    """
    return _resolve(soc, "op", env, cwd, check)


def resolve_subgraph_bank_dir(soc: str, env: Mapping[str, str] | None = None,
                              cwd: str | os.PathLike[str] | None = None, check: bool = True) -> Path:
    """Subgraph bank directory: $TUNE_BANK_PATH > $ASCEND_CACHE_PATH/aoe_data > default/graph/<soc>."""
    return _resolve(soc, "graph", env, cwd, check)


def inside(child: Path, root: Path) -> bool:
    """True if `child` resolves (symlinks followed) to a path inside `root`."""
    try:
        Path(os.path.realpath(child)).relative_to(os.path.realpath(root))
        return True
    except ValueError:
        return False


def ensure_dir(path: Path) -> None:
    """Create `path` and its missing parents, each inheriting its parent's mode and group."""
    if path.is_dir():
        return
    if path.parent != path:
        ensure_dir(path.parent)
    try:
        pst = os.stat(path.parent)
        if pst.st_mode & stat.S_ISVTX:  # a public scratch dir such as /tmp: plain umask rules
            os.mkdir(path)
        else:
            os.mkdir(path, stat.S_IMODE(pst.st_mode))
            share_like_dir(path, pst, directory=True)
    except FileExistsError:
        pass
    except OSError as exc:
        raise AoeError(f"cannot create bank directory {path}: {exc.strerror}; check the permissions "
                       f"of {path.parent} or set TUNE_BANK_PATH to a writable directory") from None


def share_like_dir(path: Path | int, dir_st: os.stat_result, directory: bool = False) -> None:
    """Give a new file (or directory) its directory's permission bits (files: minus x) and group.

    A shared bank is typically a group-owned, group-writable (often setgid) directory; files created
    with the default 0600/umask would lock the other users out. Group changes are best effort: a
    user may only chown to groups they belong to. In a sticky directory (e.g. /tmp: public scratch
    space, not a shared bank) nothing is changed: the file stays private to its owner.
    """
    if dir_st.st_mode & stat.S_ISVTX:
        return
    mode = stat.S_IMODE(dir_st.st_mode)
    mode = mode & 0o7777 if directory else mode & 0o666
    chmod = os.fchmod if isinstance(path, int) else os.chmod
    chown = os.fchown if isinstance(path, int) else os.chown
    chmod(path, mode)  # type: ignore[arg-type]
    if dir_st.st_mode & stat.S_ISGID or dir_st.st_gid != os.getegid():
        try:
            chown(path, -1, dir_st.st_gid)  # type: ignore[arg-type]
        except OSError:
            pass


def _refuse_special(path: Path, want_dir: bool) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise AoeError(f"cannot check bank path {path}: {exc.strerror}") from None
    ok = stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)
    if not ok:
        from ..durable import kind_of

        raise AoeError(f"bank path {path} is {kind_of(st.st_mode)}, not a {'directory' if want_dir else 'regular file'}: "
                       f"aoe never follows links or opens special files inside a bank; remove it (or replace "
                       f"it with a copy)")
    if not want_dir and st.st_nlink > 1:
        raise AoeError(f"bank file {path} has {st.st_nlink} hard links; aoe refuses multiply-linked bank files "
                       f"(a planted link could copy another file into the bank): replace it with a copy")


def check_bank_tree(op_bank_dir: Path | None, subgraph_bank_dir: Path | None,
                    subgraph_file: str = "subgraph.json") -> None:
    """Refuse a bank with a symbolic link, FIFO, device, socket or directory where aoe keeps a bank file
    (or a link as `unified_bank/`), once and before any tuning: an input error, not a failed case."""
    if op_bank_dir is not None:
        ub = Path(op_bank_dir) / "unified_bank"
        _refuse_special(ub, want_dir=True)
        try:
            names = sorted(e.name for e in os.scandir(ub)) if ub.is_dir() else []
        except OSError as exc:
            raise AoeError(f"cannot list bank directory {ub}: {exc.strerror}") from None
        for name in names:
            if name.endswith("_runtime_kb.json"):
                _refuse_special(ub / name, want_dir=False)
    if subgraph_bank_dir is not None:
        _refuse_special(Path(subgraph_bank_dir) / subgraph_file, want_dir=False)
