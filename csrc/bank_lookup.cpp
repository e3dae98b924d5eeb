// The operator bank's native lookup (aoe/bank/store.py `OpBank.lookup`, opfile.py `resolve_fast`):
// packing an exact query key, the file's fstat check, the probe of the cached cases and a first
// lookup's resolution in one call, and the Python entry points of bank_scan.cpp's line check. Every
// function here declines (None) whatever is not the usual case, and the Python path answers it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <structmember.h>  // T_OBJECT_EX (an Entry slot)
#include <sys/stat.h>

#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bank_scan.h"

namespace py = pybind11;
using namespace aoebank;

namespace {

const char* const kCapsule = "aoe._sim.BankSpec";

void spec_free(PyObject* cap) { delete static_cast<Spec*>(PyCapsule_GetPointer(cap, kCapsule)); }

// bank_scan(spec, line[, id, packed]) -> case tuple | None (the hot path: no argument parsing layer)
PyObject* bank_scan(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if ((nargs != 2 && nargs != 4) || !PyCapsule_CheckExact(args[0]) || !PyBytes_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "bank_scan(spec, line: bytes[, id, packed])");
        return nullptr;
    }
    auto* sp = static_cast<Spec*>(PyCapsule_GetPointer(args[0], kCapsule));
    if (sp == nullptr) return nullptr;
    PyObject* out = nargs == 4 ? scan(*sp, args[1], args[2], args[3]) : scan(*sp, args[1]);
    if (out != nullptr) return out;
    PyErr_Clear();  // not the narrow form (or out of memory): the Python path decides
    Py_RETURN_NONE;
}

// bank_case(packed, id, version, knowledge, aoe, line) -> the same untracked tuple (the Python path)
PyObject* bank_case(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "bank_case takes 6 arguments");
        return nullptr;
    }
    for (Py_ssize_t i = 0; i < 6; ++i) Py_INCREF(args[i]);
    return make_case(args[0], args[1], args[2], args[3], args[4], args[5]);
}

// Whether `k` is the str `name` (the same object, or equal ASCII text).
bool same_str(PyObject* k, PyObject* name) {
    if (k == name) return true;
    if (!PyUnicode_CheckExact(k) || !PyUnicode_IS_ASCII(k)) return false;
    const Py_ssize_t n = PyUnicode_GET_LENGTH(k);
    if (n != PyUnicode_GET_LENGTH(name)) return false;
    // a field name is a few bytes: compared inline (a memcmp call per field of every key costs more)
    const char* a = static_cast<const char*>(PyUnicode_DATA(k));
    const char* b = static_cast<const char*>(PyUnicode_DATA(name));
    for (Py_ssize_t i = 0; i < n; ++i) {
        if (a[i] != b[i]) return false;
    }
    return true;
}

// One int64 of a query key: an exact int (or bool, which struct packs as 0/1) within int64.
bool key_int(PyObject* v, long long& x) {
    if (!PyLong_CheckExact(v) && !PyBool_Check(v)) return false;
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000  // (the 3.11 int layout; elsewhere the call below)
    const Py_ssize_t size = Py_SIZE(v);  // a key's values are small: one 30-bit digit read directly
    if (size >= -1 && size <= 1) {
        x = size == 0 ? 0 : static_cast<long long>(reinterpret_cast<PyLongObject*>(v)->ob_digit[0]) * size;
        return true;
    }
#endif
    int overflow = 0;
    x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow != 0 || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return false;
    }
    return true;
}

// An exact list of exact ints (bools are not: the vector packer refuses them), packed.
bool pack_int_list(PyObject* l, Packed& out) {
    if (!PyList_CheckExact(l)) return false;
    const Py_ssize_t n = PyList_GET_SIZE(l);
    out.u32(uint32_t(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* v = PyList_GET_ITEM(l, i);
        long long x;
        if (!PyLong_CheckExact(v) || !key_int(v, x)) return false;
        out.i64(uint64_t(x));
    }
    return true;
}

// What identifies a query's attrs value exactly: a type tag and the value's bytes, recursively (exact
// bool, int within int64, float by its bits, str, None, list and dict of these; nothing else). Two
// values with the same fingerprint are the same JSON value, so they pack the same: the packed attrs
// of a fingerprint seen before are taken from the cache instead of calling the Python packer (whose
// frame and sorted dump were a fifth of a vector lookup). false: not such a value (or too deep).
bool attrs_fingerprint(PyObject* v, Packed& out, int depth) {
    if (depth > 16) return false;
    if (v == Py_None) {
        out.put("n", 1);
    } else if (PyBool_Check(v)) {
        out.put(v == Py_True ? "t" : "f", 1);
    } else if (PyLong_CheckExact(v)) {
        int overflow = 0;
        const long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow != 0 || (x == -1 && PyErr_Occurred())) return false;
        out.put("i", 1);
        out.i64(uint64_t(x));
    } else if (PyFloat_CheckExact(v)) {
        const double d = PyFloat_AS_DOUBLE(v);
        uint64_t bits;
        std::memcpy(&bits, &d, 8);
        out.put("d", 1);
        out.i64(bits);
    } else if (PyUnicode_CheckExact(v)) {
        Py_ssize_t n;
        const char* t = PyUnicode_AsUTF8AndSize(v, &n);
        if (t == nullptr) return false;
        out.put("s", 1);
        out.u32(uint32_t(n));
        out.put(t, size_t(n));
    } else if (PyList_CheckExact(v)) {
        const Py_ssize_t n = PyList_GET_SIZE(v);
        out.put("l", 1);
        out.u32(uint32_t(n));
        for (Py_ssize_t i = 0; i < n; ++i) {
            if (!attrs_fingerprint(PyList_GET_ITEM(v, i), out, depth + 1)) return false;
        }
    } else if (PyDict_CheckExact(v)) {
        out.put("o", 1);
        out.u32(uint32_t(PyDict_GET_SIZE(v)));
        Py_ssize_t pos = 0;
        PyObject *k, *x;
        while (PyDict_Next(v, &pos, &k, &x)) {
            if (!PyUnicode_CheckExact(k) || !attrs_fingerprint(k, out, depth + 1) ||
                !attrs_fingerprint(x, out, depth + 1))
                return false;
        }
    } else {
        return false;
    }
    return true;
}

// The packed canonical attrs of a query's (non-empty) attrs dict: from the cache by fingerprint, else
// by the Python packer (`sp.attrs_fn`, which raises where the Python path does). A new reference, or
// nullptr (an error may be set). The fingerprints live in the attrs cache beside the JSON texts of
// the lines (`read_attrs`), apart from them by their first byte (a text starts with '{').
PyObject* packed_attrs(const Spec& sp, PyObject* attrs) {
    Packed fp;
    fp.put("\0", 1);
    PyObject* key = attrs_fingerprint(attrs, fp, 0) ? fp.bytes() : nullptr;
    if (key == nullptr) {
        PyErr_Clear();
        return PyObject_CallOneArg(sp.attrs_fn, attrs);
    }
    PyObject* packed = PyDict_GetItemWithError(sp.attrs_cache, key);  // borrowed
    if (packed != nullptr) {
        Py_DECREF(key);
        return Py_NewRef(packed);
    }
    packed = PyErr_Occurred() ? nullptr : PyObject_CallOneArg(sp.attrs_fn, attrs);
    if (packed != nullptr && PyBytes_CheckExact(packed)) {
        if (PyDict_GET_SIZE(sp.attrs_cache) >= kAttrsCacheMax) PyDict_Clear(sp.attrs_cache);
        if (PyDict_SetItem(sp.attrs_cache, key, packed) != 0) Py_CLEAR(packed);
    }
    Py_DECREF(key);
    return packed;
}

// The packed key of a query, as `OpSchema.pack` makes it for an exact dict of exact values; false
// for anything else (the Python packer then decides, and raises where it does).
bool pack_query(const Spec& sp, PyObject* info, Packed& out) {
    if (!PyDict_CheckExact(info) || PyDict_GET_SIZE(info) != Py_ssize_t(sp.key_names.size())) return false;
    PyObject* v[7];
    if (!sp.vector) {
        // a key built in the registry order (canonical_key's) is read in one walk, without hashing
        Py_ssize_t pos = 0;
        PyObject *k, *x;
        size_t j = 0;
        long long n;
        while (PyDict_Next(info, &pos, &k, &x) && same_str(k, sp.key_names[j])) {
            if (!key_int(x, n)) return false;
            out.i64(uint64_t(n));
            if (++j == sp.key_names.size()) return true;
        }
        out.clear();
        for (PyObject* name : sp.key_names) {  // another order: field by field
            x = PyDict_GetItemWithError(info, name);  // borrowed
            if (x == nullptr || !key_int(x, n)) return false;
            out.i64(uint64_t(n));
        }
        return true;
    }
    for (int i = 0; i < 7; ++i) {
        v[i] = PyDict_GetItemWithError(info, sp.key_names[size_t(i)]);
        if (v[i] == nullptr) return false;
    }
    Py_ssize_t len;
    const char* name = PyUnicode_CheckExact(v[0]) ? PyUnicode_AsUTF8AndSize(v[0], &len) : nullptr;
    if (name == nullptr || !PyList_CheckExact(v[1]) || !PyDict_CheckExact(v[6])) return false;
    out.put("AOEV", 4);
    out.u32(uint32_t(len));
    out.put(name, size_t(len));
    const Py_ssize_t shapes = PyList_GET_SIZE(v[1]);
    out.u32(uint32_t(shapes));
    for (Py_ssize_t i = 0; i < shapes; ++i) {
        if (!pack_int_list(PyList_GET_ITEM(v[1], i), out)) return false;
    }
    for (int i = 2; i < 6; ++i) {
        if (!pack_int_list(v[i], out)) return false;
    }
    if (PyDict_GET_SIZE(v[6]) == 0) {
        out.u32(2);
        out.put("{}", 2);
        return true;
    }
    PyObject* attrs = packed_attrs(sp, v[6]);
    bool ok = attrs != nullptr && PyBytes_CheckExact(attrs);
    if (ok) out.put(PyBytes_AS_STRING(attrs), size_t(PyBytes_GET_SIZE(attrs)));
    Py_XDECREF(attrs);
    return ok;
}

// bank_pack(spec, key) -> packed bytes | None (None: the Python packer handles the key)
PyObject* bank_pack(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyCapsule_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "bank_pack(spec, key)");
        return nullptr;
    }
    auto* sp = static_cast<Spec*>(PyCapsule_GetPointer(args[0], kCapsule));
    if (sp == nullptr) return nullptr;
    Packed out;
    if (pack_query(*sp, args[1], out)) return out.bytes();
    PyErr_Clear();
    Py_RETURN_NONE;
}

// Whether fstat(fd) shows the signature (mtime_ns, size, ino) and a link left (-1: an error is set).
int same_file(long fd, PyObject* sig) {
    if (!PyTuple_CheckExact(sig) || PyTuple_GET_SIZE(sig) != 3) return 0;
    struct stat st;
    if (fd < 0 || fd > INT_MAX || fstat(int(fd), &st) != 0 || st.st_nlink == 0) return 0;
    const long long want[3] = {static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec,
                               static_cast<long long>(st.st_size), static_cast<long long>(st.st_ino)};
    for (int i = 0; i < 3; ++i) {
        int overflow = 0;
        const long long got = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(sig, i), &overflow);
        if (got == -1 && PyErr_Occurred()) return -1;
        if (overflow != 0 || got != want[i]) return 0;
    }
    return 1;
}

// bank_unchanged(fd, (mtime_ns, size, ino)) -> True when fstat(fd) shows that signature and the
// file still has a link (what `OpBank.file` checks on every call, without building a stat_result).
PyObject* bank_unchanged(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyLong_CheckExact(args[0]) || !PyTuple_CheckExact(args[1]) || PyTuple_GET_SIZE(args[1]) != 3) {
        PyErr_SetString(PyExc_TypeError, "bank_unchanged(fd: int, signature: tuple of 3 ints)");
        return nullptr;
    }
    const long fd = PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred()) return nullptr;
    const int same = same_file(fd, args[1]);
    if (same < 0) return nullptr;
    return PyBool_FromLong(same);
}

// Calls `lock.acquire()` or `lock.release()` (a threading.Lock: the bank's mutex). The method name is
// an interned str made once: a name built from a C string on every call (PyObject_CallMethod) misses
// the type's method cache and walks the MRO each time.
bool call_lock(PyObject* lock, bool acquire) {
    static PyObject* names[2] = {nullptr, nullptr};  // (the GIL is held: made once, kept for the process)
    PyObject*& name = names[acquire ? 0 : 1];
    if (name == nullptr) {
        name = PyUnicode_InternFromString(acquire ? "acquire" : "release");
        if (name == nullptr) return false;
    }
    PyObject* r = PyObject_CallMethodNoArgs(lock, name);
    Py_XDECREF(r);
    return r != nullptr;
}

// The ids filed but not parsed yet (`OpFile.pending`), as a compact open-addressing table the first
// lookup probes natively: one slot (id, line) in one cache line, where the Python dict costs a miss on
// its table, its entry, the stored key and the value objects. Built and kept by opfile.py beside the
// dict (`bank_ids_sync`, `bank_ids_discard`); an id a first lookup resolves here leaves the table at
// once and the dict when Python next reads it (`bank_ids_flush`, under the GIL in one call). Line -1:
// an id filed with several lines (the Python path resolves it). Changed only with the GIL held.
const char* const kIdsCapsule = "aoe._sim.BankIds";
constexpr long long kEmpty = LLONG_MIN, kGone = LLONG_MIN + 1;

struct IdTable {
    struct Slot {
        long long id, line;  // line kEmpty: never used; kGone: removed (a probe goes on past it)
    };
    std::vector<Slot> slots;
    size_t used = 0;                 // slots not kEmpty
    std::vector<long long> taken;    // ids resolved here, still in the dict
    bool dead = false;               // out of step with the dict (a sync failed): a probe reads nothing here

    static size_t mix(long long id) { return size_t((unsigned long long)id * 0x9E3779B97F4A7C15ull >> 20); }
    size_t home(long long id) const { return mix(id) & (slots.size() - 1); }
    const Slot* find(long long id) const {
        for (size_t j = home(id);; j = (j + 1) & (slots.size() - 1)) {
            const Slot& s = slots[j];
            if (s.line == kEmpty) return nullptr;
            if (s.id == id && s.line != kGone) return &s;
        }
    }
    void grow(size_t want) {
        size_t cap = 16;
        while (cap < want * 2) cap *= 2;
        std::vector<Slot> old;
        old.swap(slots);
        slots.assign(cap, Slot{0, kEmpty});
        used = 0;
        for (const Slot& s : old) {
            if (s.line != kEmpty && s.line != kGone) put(s.id, s.line);
        }
    }
    void put(long long id, long long line) {
        if ((used + 1) * 4 > slots.size() * 3) grow(used + 1);
        size_t j = home(id);
        Slot* free_slot = nullptr;
        for (;; j = (j + 1) & (slots.size() - 1)) {
            Slot& s = slots[j];
            if (s.line == kEmpty) break;
            if (s.line == kGone) {
                if (free_slot == nullptr) free_slot = &s;
            } else if (s.id == id) {
                s.line = line;
                return;
            }
        }
        if (free_slot == nullptr) {
            free_slot = &slots[j];
            ++used;
        }
        *free_slot = Slot{id, line};
    }
    void remove(long long id) {
        const Slot* s = find(id);
        if (s != nullptr) const_cast<Slot*>(s)->line = kGone;
    }
};

void ids_free(PyObject* cap) { delete static_cast<IdTable*>(PyCapsule_GetPointer(cap, kIdsCapsule)); }

// An exact int id as a long long: false for anything else (such an id is never in a table)
bool id_value(PyObject* h, long long* out) {
    if (!PyLong_CheckExact(h)) return false;
    int over = 0;
    *out = PyLong_AsLongLongAndOverflow(h, &over);
    if (*out == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return false;
    }
    return over == 0;
}

// The dict's value for `h` into the table: int line, -1 for a list, removed when absent. False: an id
// or line the table cannot hold.
bool ids_put(IdTable& t, PyObject* pending, PyObject* h) {
    long long id;
    if (!id_value(h, &id)) return false;
    PyObject* v = PyDict_GetItemWithError(pending, h);
    if (v == nullptr) {
        if (PyErr_Occurred()) return false;
        t.remove(id);
        return true;
    }
    long long line = -1;
    if (PyLong_CheckExact(v)) {
        line = PyLong_AsLongLong(v);
        if (line < 0) {
            PyErr_Clear();
            return false;
        }
    } else if (!PyList_CheckExact(v)) {
        return false;
    }
    t.put(id, line);
    return true;
}

IdTable* ids_of(PyObject* cap) { return static_cast<IdTable*>(PyCapsule_GetPointer(cap, kIdsCapsule)); }

// bank_ids_sync(table or None, pending, ids or None) -> the table (made from the whole dict when
// None is given), the ids' entries brought up to the dict's; None when an id or value does not fit
// (the native probe then reads the dict).
PyObject* bank_ids_sync(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyDict_CheckExact(args[1]) || !(args[0] == Py_None || PyCapsule_CheckExact(args[0])) ||
        !(args[2] == Py_None || PyList_CheckExact(args[2]))) {
        PyErr_SetString(PyExc_TypeError, "bank_ids_sync(table, pending: dict, ids: list | None)");
        return nullptr;
    }
    PyObject* cap = args[0];
    if (cap == Py_None || args[2] == Py_None) {
        auto t = std::make_unique<IdTable>();
        t->grow(size_t(PyDict_GET_SIZE(args[1])) + 1);
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(args[1], &pos, &k, &v)) {
            if (!ids_put(*t, args[1], k)) Py_RETURN_NONE;
        }
        cap = PyCapsule_New(t.get(), kIdsCapsule, ids_free);
        if (cap == nullptr) return nullptr;
        t.release();
        return cap;
    }
    IdTable* t = ids_of(cap);
    if (t == nullptr) return nullptr;
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(args[2]); ++j) {
        if (!ids_put(*t, args[1], PyList_GET_ITEM(args[2], j))) {
            t->dead = true;  // (a lookup still holding it, waiting for the lock, must not trust it)
            Py_RETURN_NONE;
        }
    }
    return Py_NewRef(cap);
}

// bank_ids_discard(table, id): the id leaves the table (resolved by the Python path)
PyObject* bank_ids_discard(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyCapsule_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "bank_ids_discard(table, id)");
        return nullptr;
    }
    IdTable* t = ids_of(args[0]);
    if (t == nullptr) return nullptr;
    long long id;
    if (id_value(args[1], &id)) t->remove(id);
    Py_RETURN_NONE;
}

// bank_ids_flush(table, pending): the ids resolved natively since the last call leave the dict (one
// call, so no other thread sees some of them gone and not others)
PyObject* bank_ids_flush(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyCapsule_CheckExact(args[0]) || !PyDict_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "bank_ids_flush(table, pending: dict)");
        return nullptr;
    }
    IdTable* t = ids_of(args[0]);
    if (t == nullptr) return nullptr;
    std::vector<long long> ids;
    ids.swap(t->taken);
    for (long long id : ids) {
        PyObject* h = PyLong_FromLongLong(id);
        if (h == nullptr) return nullptr;
        const int rc = PyDict_DelItem(args[1], h);
        Py_DECREF(h);
        if (rc != 0) {
            if (!PyErr_ExceptionMatches(PyExc_KeyError)) return nullptr;
            PyErr_Clear();
        }
    }
    Py_RETURN_NONE;
}

PyMethodDef kIdsSyncDef = {"bank_ids_sync", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(bank_ids_sync)),
                           METH_FASTCALL,
                           "bank_ids_sync(table, pending, ids) -> the native table of the pending ids (made "
                           "from the dict when table or ids is None), or None when they do not fit."};
PyMethodDef kIdsDiscardDef = {
    "bank_ids_discard", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(bank_ids_discard)), METH_FASTCALL,
    "bank_ids_discard(table, id): the id leaves the native table."};
PyMethodDef kIdsFlushDef = {
    "bank_ids_flush", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(bank_ids_flush)), METH_FASTCALL,
    "bank_ids_flush(table, pending): the ids resolved natively leave the dict."};

// `OpFile.resolve_fast` (see there), natively: under the bank's lock, the one line filed under `h`,
// if it is still that and unparsed, checked and cached by `scan` and indexed with the same stores in
// the same order. `state` = (pending, quick, recs, bulk, table): the OpFile's containers (`OpFile.fast`;
// table: the pending ids' IdTable, read instead of the dict, or None);
// the case's line number goes to `quick`, the index stores that `OpFile.index` makes when it is next
// read (a lookup never reads the index: hashing the packed key into a large dict was a third of
// the call). 1: indexed (*out: its case); 0: the line is not the usual case; 2: not tried (the state
// is not the usual one: a line appended since the load, say); -1: an error is set. Nothing changed
// but on 1.
int resolve_first(const Spec& sp, PyObject* state, PyObject* lock, PyObject* hits, PyObject* h, PyObject* packed,
                  PyObject** out) {
    PyObject *pending = PyTuple_GET_ITEM(state, 0), *quick = PyTuple_GET_ITEM(state, 1);
    PyObject *recs = PyTuple_GET_ITEM(state, 2), *bulk = PyTuple_GET_ITEM(state, 3);
    PyObject* table = PyTuple_GET_ITEM(state, 4);
    if (!PyDict_CheckExact(pending) || !PyList_CheckExact(quick) || !PyList_CheckExact(recs) ||
        !PyTuple_CheckExact(bulk) || !(table == Py_None || PyCapsule_CheckExact(table)))
        return 2;
    IdTable* t = table == Py_None ? nullptr : ids_of(table);
    long long id = 0;
    if (t == nullptr && table != Py_None) return -1;
    if (t != nullptr && !id_value(h, &id)) return 2;
    if (!call_lock(lock, true)) return -1;
    if (t != nullptr && t->dead) return call_lock(lock, false) ? 2 : -1;  // (dropped while the lock was awaited)
    int rc = 2;
    PyObject* c = nullptr;
    PyObject* i = nullptr;  // pending's value (borrowed: the lock keeps it alive), without a table
    Py_ssize_t at = -1;
    if (t != nullptr) {
        const IdTable::Slot* s = t->find(id);  // (again under the lock: another thread may have resolved it)
        at = s != nullptr && s->line <= PY_SSIZE_T_MAX ? Py_ssize_t(s->line) : -1;
    } else {
        i = PyDict_GetItemWithError(pending, h);
        at = i != nullptr && PyLong_CheckExact(i) ? PyLong_AsSsize_t(i) : -1;
    }
    if (at >= 0 && at < PyTuple_GET_SIZE(bulk) && at < PyList_GET_SIZE(recs) &&
        PyList_GET_ITEM(recs, at) == sp.unparsed && PyDict_Contains(hits, h) == 0 &&
        PyBytes_CheckExact(PyTuple_GET_ITEM(bulk, at))) {
        rc = 0;
        c = scan(sp, PyTuple_GET_ITEM(bulk, at), h, packed);
        if (c == nullptr) PyErr_Clear();  // not the usual case: the Python path resolves it
    }
    if (c != nullptr && PyObject_RichCompareBool(PyTuple_GET_ITEM(c, 1), h, Py_EQ) == 1) {
        // `resolve_fast`'s stores, in its order: the hit before the pending entry goes (a reader that
        // sees neither would miss the case); with a table, the id leaves it now and the dict when
        // Python next reads it (`bank_ids_flush`)
        PyObject* k = PyTuple_Pack(2, h, PyTuple_GET_ITEM(c, 0));
        PyObject* n = i != nullptr ? Py_NewRef(i) : PyLong_FromSsize_t(at);
        bool ok = k != nullptr && n != nullptr && PyList_SetItem(recs, at, (Py_INCREF(k), k)) == 0 &&
                  PyList_Append(quick, n) == 0 && PyDict_SetItem(hits, h, c) == 0;
        if (ok && t != nullptr) {
            try {
                t->taken.push_back(id);
                t->remove(id);
            } catch (const std::bad_alloc&) {
                PyErr_NoMemory();
                ok = false;
            }
        } else if (ok) {
            ok = PyDict_DelItem(pending, h) == 0;
        }
        rc = ok ? 1 : -1;
        Py_XDECREF(n);
        Py_XDECREF(k);
    }
    if (rc == 1) {
        *out = c;
    } else {
        Py_XDECREF(c);
    }
    if (rc != 1 && PyErr_Occurred()) rc = -1;
    if (!call_lock(lock, false)) rc = -1;
    return rc;
}

// The `Entry` of a cached case, as `opfile.entry_of` makes it (the type's own allocation, its three
// slots set): built here, a lookup that finds its case runs no Python function after the call.
PyObject* new_entry(const Spec& sp, PyObject* c) {
    auto* type = reinterpret_cast<PyTypeObject*>(sp.entry_type);
    PyObject* e = type->tp_alloc(type, 0);
    if (e == nullptr) return nullptr;
    char* base = reinterpret_cast<char*>(e);
    *reinterpret_cast<PyObject**>(base + sp.op_off) = Py_NewRef(sp.entry_op);
    *reinterpret_cast<PyObject**>(base + sp.source_off) = Py_NewRef(sp.entry_source);
    *reinterpret_cast<PyObject**>(base + sp.case_off) = Py_NewRef(c);
    return e;
}

// bank_probe(spec, fd, signature, key, hash_fn, hits, state, lock) -> the Entry of the key's cached case
// (the case tuple itself for a spec made without the Entry type); or
// (id, packed key) when the id holds no case with that key; or (id, packed key, False) when its
// filed line is not the usual case (the Python path resolves it); or None when the Python path must
// answer (fstat shows a changed file, or the key is not an exact dict of plain values). fd -1: the
// file is not re-validated (package data); state None: no first lookup here. The body of
// `OpBank.lookup` for the usual call, in one native call; hash_fn's exceptions propagate.
PyObject* bank_probe(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 8 || !PyCapsule_CheckExact(args[0]) || !PyLong_CheckExact(args[1]) || !PyDict_CheckExact(args[5]) ||
        !(args[6] == Py_None || (PyTuple_CheckExact(args[6]) && PyTuple_GET_SIZE(args[6]) == 5))) {
        PyErr_SetString(PyExc_TypeError, "bank_probe(spec, fd, signature, key, hash_fn, hits, state, lock)");
        return nullptr;
    }
    auto* sp = static_cast<Spec*>(PyCapsule_GetPointer(args[0], kCapsule));
    if (sp == nullptr) return nullptr;
    const long fd = PyLong_AsLong(args[1]);
    if (fd == -1 && PyErr_Occurred()) return nullptr;
    if (PyDict_CheckExact(args[3])) {
        // the caller's key is usually freshly built and out of the cache: its table's lines are asked
        // for now, to arrive during the fstat below instead of stalling the packing one by one (a
        // prefetch never faults, so reading past the table's end is harmless)
        const char* t = reinterpret_cast<const char*>(reinterpret_cast<PyDictObject*>(args[3])->ma_keys);
        const Py_ssize_t n = PyDict_GET_SIZE(args[3]);
        for (Py_ssize_t i = 0; i < 64 + 24 * n; i += 64) __builtin_prefetch(t + i);
    }
    if (fd != -1) {
        const int same = same_file(fd, args[2]);
        if (same < 0) return nullptr;
        if (same == 0) Py_RETURN_NONE;
    }
    Packed out;
    if (!pack_query(*sp, args[3], out)) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject* packed = out.bytes();
    if (packed == nullptr) return nullptr;
    PyObject* h = PyObject_CallOneArg(args[4], packed);
    if (h == nullptr) {
        Py_DECREF(packed);
        return nullptr;
    }
    PyObject* v = PyDict_GetItemWithError(args[5], h);  // borrowed
    PyObject* c = nullptr;
    int first = 0;
    if (v == nullptr && !PyErr_Occurred() && args[6] != Py_None) {
        // pending: its line's number, from the native table when there is one (see IdTable)
        PyObject* table = PyTuple_GET_ITEM(args[6], 4);
        Py_ssize_t at = -1;
        bool filed = false;
        if (PyCapsule_CheckExact(table)) {
            const IdTable* t = ids_of(table);
            long long id;
            if (t == nullptr) PyErr_Clear();
            if (t != nullptr && !t->dead && id_value(h, &id)) {
                const IdTable::Slot* s = t->find(id);
                filed = s != nullptr;
                at = filed && s->line <= PY_SSIZE_T_MAX ? Py_ssize_t(s->line) : -1;
            } else {
                filed = true;  // (an id the table cannot hold: `resolve_first` declines, Python answers)
            }
        } else {
            PyObject* i = PyDict_GetItemWithError(PyTuple_GET_ITEM(args[6], 0), h);
            filed = i != nullptr;
            at = filed && PyLong_CheckExact(i) ? PyLong_AsSsize_t(i) : -1;
        }
        if (filed) {
            // the line's slots and the line itself are far apart and rarely cached: asked for now, they
            // arrive while the bank's lock is taken (a prefetch never faults; what is read under the
            // lock is read again there)
            PyObject *recs = PyTuple_GET_ITEM(args[6], 2), *bulk = PyTuple_GET_ITEM(args[6], 3);
            if (at >= 0 && PyList_CheckExact(recs) && at < PyList_GET_SIZE(recs) && PyTuple_CheckExact(bulk) &&
                at < PyTuple_GET_SIZE(bulk)) {
                __builtin_prefetch(&PyList_GET_ITEM(recs, at));
                const char* ln = reinterpret_cast<const char*>(PyTuple_GET_ITEM(bulk, at));
                __builtin_prefetch(ln);
                __builtin_prefetch(ln + 64);
            }
            PyErr_Clear();
            first = resolve_first(*sp, args[6], args[7], args[5], h, packed, &c);  // (c: a new reference)
            v = c;
        }
    }
    if (PyErr_Occurred() || first < 0) {
        Py_DECREF(packed);
        Py_DECREF(h);
        Py_XDECREF(c);
        return nullptr;
    }
    if (v != nullptr && PyTuple_CheckExact(v) && PyTuple_GET_SIZE(v) == 6) {
        PyObject* k = PyTuple_GET_ITEM(v, 0);
        if (PyBytes_CheckExact(k) && PyBytes_GET_SIZE(k) == PyBytes_GET_SIZE(packed) &&
            std::memcmp(PyBytes_AS_STRING(k), PyBytes_AS_STRING(packed), size_t(PyBytes_GET_SIZE(k))) == 0) {
            Py_DECREF(packed);
            Py_DECREF(h);
            PyObject* e = sp->entry_type != nullptr ? new_entry(*sp, v) : Py_NewRef(v);
            Py_XDECREF(c);
            return e;
        }
    }
    Py_XDECREF(c);
    // (0: the id's one filed line was tried under the lock and declined, nothing changed: still filed)
    const bool declined = v == nullptr && args[6] != Py_None && first == 0;
    PyObject* r = declined ? PyTuple_Pack(3, h, packed, Py_False) : PyTuple_Pack(2, h, packed);
    Py_DECREF(packed);
    Py_DECREF(h);
    return r;
}

PyMethodDef kProbeDef = {
    "bank_probe", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(bank_probe)), METH_FASTCALL,
    "bank_probe(spec, fd, signature, key, hash_fn, hits, state, lock) -> the Entry of the cached case "
    "(found, or cached now by a first lookup), (id, packed key[, False]) to look further, or None (the "
    "Python path answers)."};

PyMethodDef kPackDef = {"bank_pack", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(bank_pack)),
                        METH_FASTCALL,
                        "bank_pack(spec, key) -> the packed key bytes of an exact dict of exact values, or "
                        "None (the Python packer then handles the key)."};
PyMethodDef kUnchangedDef = {
    "bank_unchanged", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(bank_unchanged)), METH_FASTCALL,
    "bank_unchanged(fd, (mtime_ns, size, ino)) -> whether fstat(fd) shows that signature and a link."};

PyMethodDef kScanDef = {"bank_scan", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(bank_scan)),
                        METH_FASTCALL,
                        "bank_scan(spec, line[, id, packed]) -> (packed, id, version, knowledge, aoe, line) or "
                        "None: one of aoe's own bank lines checked and cached in one pass (sharing the objects "
                        "id and packed when equal); None leaves the line to the Python check."};
PyMethodDef kCaseDef = {"bank_case", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(bank_case)),
                        METH_FASTCALL,
                        "bank_case(packed, id, version, knowledge, aoe, line) -> the tuple of these six, "
                        "untracked by the cyclic GC (a cached bank case)."};

PyObject* interned(const std::string& s) {
    PyObject* o = PyUnicode_InternFromString(s.c_str());
    if (o == nullptr) throw py::error_already_set();
    return o;
}

py::object bank_spec(const std::string& op, bool vector, const std::vector<std::string>& key_fields,
                     const std::vector<std::string>& knowledge_fields, long long know_max, double perf_max,
                     py::dict attrs_cache, py::object attrs_fn, py::object unparsed,
                     const std::vector<std::string>& impl_names, py::object entry_type, py::object source,
                     py::object know_proto) {
    auto sp = std::make_unique<Spec>();
    sp->op_lit = ",\"op\":\"" + op + "\"";
    sp->vector = vector;
    for (size_t i = 0; i < key_fields.size(); ++i) {
        sp->key_lits.push_back((i ? ",\"" : "\"") + key_fields[i] + "\":");
        sp->key_names.push_back(interned(key_fields[i]));
    }
    for (const std::string& f : knowledge_fields) {
        sp->know_lits.push_back("\"" + f + "\":");
        sp->know_keys.push_back(interned(f));
    }
    if (!know_proto.is_none()) {
        // the caller's prototype (opfile.py: a key-sharing dict); it must be exactly the fields -> None
        PyObject* d = know_proto.ptr();
        bool ok = PyDict_CheckExact(d) && PyDict_GET_SIZE(d) == Py_ssize_t(sp->know_keys.size());
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        for (size_t j = 0; ok && PyDict_Next(d, &pos, &k, &v); ++j) {
            ok = v == Py_None && PyUnicode_Check(k) && PyUnicode_Compare(k, sp->know_keys[j]) == 0;
        }
        if (PyErr_Occurred()) throw py::error_already_set();
        if (!ok) throw py::value_error("bank_spec: know_proto must map the knowledge fields, in order, to None");
        sp->know_proto = know_proto.release().ptr();
    } else {
        sp->know_proto = PyDict_New();
        if (sp->know_proto == nullptr) throw py::error_already_set();
        for (PyObject* k : sp->know_keys) {
            if (PyDict_SetItem(sp->know_proto, k, Py_None) != 0) throw py::error_already_set();
        }
    }
    sp->know_split = check_split_values(*sp);
    sp->know_max = know_max;
    sp->impl_names = impl_names;
    sp->perf_max = perf_max;
    sp->perf_key = interned("perf_us");
    sp->default_key = interned("default_perf_us");
    sp->attrs_cache = attrs_cache.release().ptr();
    sp->attrs_fn = attrs_fn.release().ptr();
    sp->unparsed = unparsed.release().ptr();
    if (!entry_type.is_none()) {
        // the Entry's slots: where its member descriptors say they are (a type with __slots__ only)
        if (!PyType_Check(entry_type.ptr())) throw py::type_error("bank_spec: entry_type must be a type");
        Py_ssize_t* offs[3] = {&sp->op_off, &sp->source_off, &sp->case_off};
        const char* names[3] = {"op", "source", "_c"};
        for (int j = 0; j < 3; ++j) {
            py::object d = entry_type.attr(names[j]);
            if (Py_TYPE(d.ptr()) != &PyMemberDescr_Type) throw py::type_error("bank_spec: entry_type needs slots op, source, _c");
            PyMemberDef* m = reinterpret_cast<PyMemberDescrObject*>(d.ptr())->d_member;
            if (m->type != T_OBJECT_EX) throw py::type_error("bank_spec: entry_type's slots must be object slots");
            *offs[j] = m->offset;
        }
        if (!py::isinstance<py::str>(source)) throw py::type_error("bank_spec: source must be a str");
        sp->entry_op = interned(op);
        sp->entry_source = source.release().ptr();
        sp->entry_type = entry_type.release().ptr();
    }
    PyObject* cap = PyCapsule_New(sp.get(), kCapsule, spec_free);
    if (cap == nullptr) throw py::error_already_set();
    sp.release();
    return py::reinterpret_steal<py::object>(cap);
}

void add_function(py::module_& m, PyMethodDef* def) {
    PyObject* f = PyCFunction_NewEx(def, nullptr, m.ptr());
    if (f == nullptr) throw py::error_already_set();
    m.add_object(def->ml_name, py::reinterpret_steal<py::object>(f));
}

}  // namespace

// Called from the module definition (bindings.cpp): adds `bank_spec`, `bank_scan`, `bank_case`,
// `bank_pack`, `bank_unchanged` and `bank_probe`.
void register_bank_scan(py::module_& m) {
    m.def("bank_spec", &bank_spec, py::arg("op"), py::arg("vector"), py::arg("key_fields"),
          py::arg("knowledge_fields"), py::arg("know_max"), py::arg("perf_max"), py::arg("attrs_cache"),
          py::arg("attrs_fn"), py::arg("unparsed"), py::arg("impl_names") = std::vector<std::string>{},
          py::arg("entry_type") = py::none(), py::arg("source") = py::none(), py::arg("know_proto") = py::none(),
          "What `bank_scan` checks the lines of one operator file against (an opaque capsule).");
    add_function(m, &kScanDef);
    add_function(m, &kCaseDef);
    add_function(m, &kPackDef);
    add_function(m, &kUnchangedDef);
    add_function(m, &kProbeDef);
    add_function(m, &kIdsSyncDef);
    add_function(m, &kIdsDiscardDef);
    add_function(m, &kIdsFlushDef);
}

