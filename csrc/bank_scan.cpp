// The first lookup of a bank case, natively: one pass over one of aoe's own record lines that both
// checks it and builds what the bank caches of it (aoe/bank/opfile.py, `native_checker`).
//
// This is a recogniser of a NARROW form, not a JSON parser: the exact layout aoe writes (orjson, no
// whitespace, members in aoe's order, plain ASCII strings without escapes, integers of at most 18
// digits, finite floats). A line in that form that passes every rule of the bank's Python check
// (aoe/bank/opfile.py `record_checker`) yields the case the Python path would build; ANY other line
// — not in the form, or in it but breaking a rule — yields None, and the caller runs the Python path
// on it, which gives the verdict and the message. So no rule is decided here instead of there: a
// line is accepted here only where the Python path accepts it with the same result (the
// differential tests in tests/test_bank_native.py hold the two together), and every refusal is the
// Python code's.
#include "bank_scan.h"

#include <charconv>
#include <cmath>

namespace aoebank {
namespace {

constexpr int kMaxDepth = 32;          // nesting accepted in extra fields (orjson's own limit is far above)
constexpr int kMaxIntDigits = 18;      // larger integers: the Python path (orjson turns > 64-bit ones into floats)
constexpr size_t kMaxFloatChars = 40;  // longer number tokens: the Python path

bool is_digit(char c) { return static_cast<unsigned char>(c - '0') < 10; }

struct Cur {
    const char* p;
    const char* end;

    // the literals are a few bytes: compared inline, eight at a time (a memcmp call costs more)
    bool lit(const char* s, size_t n) {
        if (size_t(end - p) < n) return false;
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
            uint64_t a, b;
            std::memcpy(&a, p + i, 8);
            std::memcpy(&b, s + i, 8);
            if (a != b) return false;
        }
        for (; i < n; ++i) {
            if (p[i] != s[i]) return false;
        }
        p += n;
        return true;
    }
    bool lit(const std::string& s) { return lit(s.data(), s.size()); }
    bool ch(char c) {
        if (p < end && *p == c) {
            ++p;
            return true;
        }
        return false;
    }
    bool digit() const { return p < end && is_digit(*p); }
    // a number token ends at one of these (anything else after it is not the narrow form)
    bool at_number_end() const { return p < end && (*p == ',' || *p == '}' || *p == ']'); }
};

// A JSON integer `0|[1-9][0-9]*` of at most `max_digits` (<= 19) digits, with no fraction or
// exponent after it; false for any other token.
bool read_uint(Cur& c, int max_digits, uint64_t& v) {
    const char* s = c.p;
    uint64_t x = 0;
    if (c.p < c.end && *c.p == '0') {
        ++c.p;
    } else {
        while (c.p < c.end && is_digit(*c.p)) x = x * 10 + uint64_t(*c.p++ - '0');
        if (c.p == s || c.p - s > max_digits) return false;
    }
    v = x;
    return c.at_number_end();
}

// A signed integer of at most kMaxIntDigits digits.
bool read_int(Cur& c, long long& v) {
    bool neg = c.ch('-');
    uint64_t x;
    if (!read_uint(c, kMaxIntDigits, x)) return false;
    v = neg ? -static_cast<long long>(x) : static_cast<long long>(x);
    return true;
}

// A string of printable ASCII without escapes; [s, s + n) is its content.
bool read_str(Cur& c, const char*& s, size_t& n) {
    if (!c.ch('"')) return false;
    s = c.p;
    while (c.p < c.end && *c.p != '"') {
        unsigned char u = static_cast<unsigned char>(*c.p);
        if (u < 0x20 || u > 0x7e || u == '\\') return false;
        ++c.p;
    }
    if (c.p == c.end) return false;
    n = size_t(c.p - s);
    ++c.p;
    return true;
}

// A JSON number token as orjson reads it: an int (no fraction or exponent, at most kMaxIntDigits
// digits) or a finite, non-zero float (correctly rounded, as orjson does).
bool read_number(Cur& c, bool& is_int, long long& iv, double& dv) {
    const char* s = c.p;
    Cur q = c;
    q.ch('-');
    if (!q.digit()) return false;
    if (*q.p == '0') {
        ++q.p;
    } else {
        while (q.digit()) ++q.p;
    }
    bool frac = false;
    if (q.ch('.')) {
        if (!q.digit()) return false;
        while (q.digit()) ++q.p;
        frac = true;
    }
    if (q.p < q.end && (*q.p == 'e' || *q.p == 'E')) {
        ++q.p;
        if (!q.ch('+')) q.ch('-');
        if (!q.digit()) return false;
        while (q.digit()) ++q.p;
        frac = true;
    }
    if (!q.at_number_end()) return false;
    if (!frac) {
        is_int = true;
        return read_int(c, iv);
    }
    size_t n = size_t(q.p - s);
    if (n > kMaxFloatChars) return false;
    // correctly rounded, as orjson and PyOS_string_to_double are (the token's grammar is checked
    // above), in a fraction of dtoa's time: the stored time is a 17-digit float in every record
    double d = 0;
    const std::from_chars_result r = std::from_chars(s, q.p, d);
    // orjson refuses an infinite value; an out-of-range or underflow-to-zero one is left to the Python path
    if (r.ec != std::errc() || r.ptr != q.p || !std::isfinite(d) || d == 0.0) return false;
    is_int = false;
    dv = d;
    c.p = q.p;
    return true;
}

PyObject* read_value(Cur& c, int depth);

// An object whose keys are plain strings and values any value of the narrow form; nullptr when the
// text is not of that form or a key repeats (orjson would keep the last: left to the Python path).
PyObject* read_object(Cur& c, int depth) {
    if (depth > kMaxDepth || !c.ch('{')) return nullptr;
    PyObject* d = PyDict_New();
    if (d == nullptr) return nullptr;
    Py_ssize_t n = 0;
    if (c.ch('}')) return d;
    do {
        const char* s;
        size_t len;
        if (!read_str(c, s, len) || !c.ch(':')) break;
        PyObject* k = PyUnicode_DecodeASCII(s, Py_ssize_t(len), nullptr);
        if (k == nullptr) break;
        PyObject* v = read_value(c, depth + 1);
        int rc = v != nullptr ? PyDict_SetItem(d, k, v) : -1;
        Py_DECREF(k);
        Py_XDECREF(v);
        if (rc != 0) break;
        ++n;
        if (c.ch('}')) {
            if (PyDict_GET_SIZE(d) == n) return d;
            break;
        }
    } while (c.ch(','));
    Py_DECREF(d);
    return nullptr;
}

PyObject* read_list(Cur& c, int depth) {
    if (depth > kMaxDepth || !c.ch('[')) return nullptr;
    PyObject* l = PyList_New(0);
    if (l == nullptr) return nullptr;
    if (c.ch(']')) return l;
    do {
        PyObject* v = read_value(c, depth + 1);
        int rc = v != nullptr ? PyList_Append(l, v) : -1;
        Py_XDECREF(v);
        if (rc != 0) break;
        if (c.ch(']')) return l;
    } while (c.ch(','));
    Py_DECREF(l);
    return nullptr;
}

// Any value of the narrow form as the Python object orjson makes of it (new reference), or nullptr.
PyObject* read_value(Cur& c, int depth) {
    if (c.p >= c.end) return nullptr;
    switch (*c.p) {
        case '{':
            return read_object(c, depth);
        case '[':
            return read_list(c, depth);
        case '"': {
            const char* s;
            size_t n;
            if (!read_str(c, s, n)) return nullptr;
            return PyUnicode_DecodeASCII(s, Py_ssize_t(n), nullptr);
        }
        case 't':
            if (c.lit("true", 4)) Py_RETURN_TRUE;
            return nullptr;
        case 'f':
            if (c.lit("false", 5)) Py_RETURN_FALSE;
            return nullptr;
        case 'n':
            if (c.lit("null", 4)) Py_RETURN_NONE;
            return nullptr;
        default: {
            bool is_int;
            long long iv;
            double dv;
            if (!read_number(c, is_int, iv, dv)) return nullptr;
            return is_int ? PyLong_FromLongLong(iv) : PyFloat_FromDouble(dv);
        }
    }
}

// A list of int64 values (each within ±(2^63 - 1)), packed as a u32 count + the values.
bool read_int_list(Cur& c, Packed& out) {
    if (!c.ch('[')) return false;
    size_t at = out.size();
    out.u32(0);
    uint32_t n = 0;
    if (!c.ch(']')) {
        do {
            bool neg = c.ch('-');
            uint64_t v;
            if (!read_uint(c, 19, v) || v > uint64_t(INT64_MAX)) return false;
            out.i64(neg ? uint64_t(0) - v : v);
            ++n;
        } while (c.ch(','));
        if (!c.ch(']')) return false;
    }
    out.set_u32(at, n);
    return true;
}

// The end of the object at `s` (past its closing brace) as brackets and plain strings delimit it, or
// nullptr (a backslash, or no end): where a cached attrs text would end, found without reading it.
const char* object_end(const char* s, const char* end) {
    int depth = 0;
    for (const char* p = s; p < end; ++p) {
        const char ch = *p;
        if (ch == '"') {
            while (++p < end && *p != '"') {
                if (*p == '\\') return nullptr;
            }
            if (p == end) return nullptr;
        } else if (ch == '{' || ch == '[') {
            ++depth;
        } else if (ch == '}' || ch == ']') {
            if (--depth == 0) return p + 1;
        }
    }
    return nullptr;
}

// The packed canonical attrs (u32 length + canonical JSON) of the attrs object at `c`: looked up
// by its text in the cache, else computed by the Python packer from the object read here.
bool read_attrs(const Spec& sp, Cur& c, Packed& out) {
    if (c.lit("{}", 2)) {
        out.u32(2);
        out.put("{}", 2);
        return true;
    }
    const char* s = c.p;
    if (const char* e = object_end(s, c.end)) {
        // a text in the cache was read whole as an attrs object when it was put there, so the same
        // bytes here are that object and end where it ended: no need to read them again
        PyObject* text = PyBytes_FromStringAndSize(s, e - s);
        PyObject* hit = text != nullptr ? PyDict_GetItemWithError(sp.attrs_cache, text) : nullptr;  // borrowed
        Py_XDECREF(text);
        if (hit != nullptr && PyBytes_CheckExact(hit)) {
            out.put(PyBytes_AS_STRING(hit), size_t(PyBytes_GET_SIZE(hit)));
            c.p = e;
            return true;
        }
        PyErr_Clear();
    }
    PyObject* obj = read_object(c, 1);
    if (obj == nullptr) return false;
    PyObject* text = PyBytes_FromStringAndSize(s, c.p - s);
    PyObject* packed = text != nullptr ? PyDict_GetItemWithError(sp.attrs_cache, text) : nullptr;  // borrowed
    if (packed != nullptr) {
        Py_INCREF(packed);
    } else if (text != nullptr && !PyErr_Occurred()) {
        packed = PyObject_CallOneArg(sp.attrs_fn, obj);
        if (packed != nullptr && PyBytes_CheckExact(packed)) {
            if (PyDict_GET_SIZE(sp.attrs_cache) >= kAttrsCacheMax) PyDict_Clear(sp.attrs_cache);
            if (PyDict_SetItem(sp.attrs_cache, text, packed) != 0) Py_CLEAR(packed);
        } else {
            Py_CLEAR(packed);
        }
    }
    Py_DECREF(obj);
    Py_XDECREF(text);
    if (packed == nullptr) {
        PyErr_Clear();  // the Python path meets the same error and says it
        return false;
    }
    out.put(PyBytes_AS_STRING(packed), size_t(PyBytes_GET_SIZE(packed)));
    Py_DECREF(packed);
    return true;
}

// The vector key (op_type, input_shapes, the four code lists, attrs: this order) packed.
bool read_vector_key(const Spec& sp, Cur& c, Packed& out) {
    const char* s;
    size_t n;
    if (!c.lit("{\"op_type\":", 11) || !read_str(c, s, n)) return false;
    out.put("AOEV", 4);
    out.u32(uint32_t(n));
    out.put(s, n);
    if (!c.lit(",\"input_shapes\":[", 17)) return false;
    size_t at = out.size();
    out.u32(0);
    uint32_t shapes = 0;
    if (!c.ch(']')) {
        do {
            if (!read_int_list(c, out)) return false;
            ++shapes;
        } while (c.ch(','));
        if (!c.ch(']')) return false;
    }
    out.set_u32(at, shapes);
    return c.lit(",\"input_dtypes\":", 16) && read_int_list(c, out) && c.lit(",\"input_formats\":", 17) &&
           read_int_list(c, out) && c.lit(",\"output_dtypes\":", 17) && read_int_list(c, out) &&
           c.lit(",\"output_formats\":", 18) && read_int_list(c, out) && c.lit(",\"attrs\":", 9) &&
           read_attrs(sp, c, out) && c.ch('}');
}

// A MatMul / Conv key: every field in the registry order, a non-negative int64 each.
bool read_fixed_key(const Spec& sp, Cur& c, Packed& out) {
    if (!c.ch('{')) return false;
    for (const std::string& l : sp.key_lits) {
        uint64_t v;
        if (!c.lit(l) || !read_uint(c, 19, v) || v > uint64_t(INT64_MAX)) return false;
        out.i64(v);
    }
    return c.ch('}');
}

// Sets `d[k] = v` and releases both (either may be nullptr: then false).
bool put_item(PyObject* d, PyObject* k, PyObject* v) {
    int rc = (k != nullptr && v != nullptr) ? PyDict_SetItem(d, k, v) : -1;
    Py_XDECREF(k);
    Py_XDECREF(v);
    return rc == 0;
}

// The knowledge object: every schema field an integer in [0, know_max] (in any order, once), and of
// the extra fields only `"impl"` naming one of the spec's implementations; a line with any other extra
// field (formats, kernel, anything unknown) takes the Python path, which checks it field by field.
// Fields in the registry order are matched by their literal.
PyObject* read_knowledge_any(const Spec& sp, Cur& c) {
    const size_t nf = sp.know_lits.size();
    if (!c.ch('{')) return nullptr;
    PyObject* d = _PyDict_NewPresized(Py_ssize_t(nf));  // (no resize while it fills)
    if (d == nullptr) return nullptr;
    size_t next = 0, found = 0;
    Py_ssize_t members = 0;
    bool ok = c.ch('}');
    while (!ok) {  // one member a turn; `ok` once the closing brace is read
        size_t f = nf;
        if (next < nf && c.lit(sp.know_lits[next])) {
            f = next;
        } else {
            const char* before = c.p;
            const char* s;
            size_t len;
            if (!read_str(c, s, len) || !c.ch(':')) break;
            const size_t lit_len = size_t(c.p - before);
            for (size_t i = 0; i < nf && f == nf; ++i) {
                if (sp.know_lits[i].size() == lit_len && std::memcmp(sp.know_lits[i].data(), before, lit_len) == 0) f = i;
            }
            if (f == nf) {  // an extra field: only "impl" with a known name is decided here
                const char* v;
                size_t vlen;
                if (len != 4 || std::memcmp(s, "impl", 4) != 0 || !read_str(c, v, vlen)) break;
                bool known = false;
                for (const std::string& name : sp.impl_names) {
                    if (name.size() == vlen && std::memcmp(name.data(), v, vlen) == 0) known = true;
                }
                if (!known) break;
                PyObject* k = PyUnicode_DecodeASCII(s, Py_ssize_t(len), nullptr);
                if (!put_item(d, k, k != nullptr ? PyUnicode_DecodeASCII(v, Py_ssize_t(vlen), nullptr) : nullptr)) break;
            }
        }
        if (f < nf) {
            uint64_t x;
            if (!read_uint(c, kMaxIntDigits, x) || x > uint64_t(sp.know_max)) break;
            Py_INCREF(sp.know_keys[f]);
            if (!put_item(d, sp.know_keys[f], PyLong_FromUnsignedLongLong(x))) break;
            next = f + 1;
            ++found;
        }
        ++members;
        if (c.ch('}')) {
            ok = true;
        } else if (!c.ch(',')) {
            break;
        }
    }
    // no key twice (a repeated schema field would be counted twice in `found` as well)
    if (ok && PyDict_GET_SIZE(d) == members && found == nf) return d;
    Py_DECREF(d);
    return nullptr;
}

}  // namespace

// The value slots of a fresh copy of the spec's knowledge prototype, when the copy is a split dict
// whose slot i holds field i (checked once by `check_split_values`); else nullptr. Then the native
// pass puts each value in its slot instead of a PyDict_SetItem per field (a hash-table probe each:
// a fifth of a MatMul line's pass). Nothing has seen the fresh copy, so no dict version or watcher
// is concerned; its values are ints, so its GC tracking (none, as the prototype's) stays right.
PyObject** split_values(const Spec& sp, PyObject* d) {
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000  // (3.11, 3.12: PyDictValues = the slots)
    if (!sp.know_split) return nullptr;
    return reinterpret_cast<PyObject**>(reinterpret_cast<PyDictObject*>(d)->ma_values);
#else
    (void)sp;
    (void)d;
    return nullptr;
#endif
}

// Whether `split_values` may be used for this spec: a copy of the prototype is split, and storing
// field i through PyDict_SetItem lands in its slot i, for every field.
bool check_split_values(const Spec& sp) {
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000
    PyObject* d = PyDict_Copy(sp.know_proto);
    if (d == nullptr) {
        PyErr_Clear();
        return false;
    }
    auto* slots = reinterpret_cast<PyObject**>(reinterpret_cast<PyDictObject*>(d)->ma_values);
    bool ok = slots != nullptr && PyDict_GET_SIZE(d) == Py_ssize_t(sp.know_keys.size());
    for (size_t i = 0; ok && i < sp.know_keys.size(); ++i) {
        PyObject* v = PyLong_FromSize_t(1000003 + i);
        ok = v != nullptr && PyDict_SetItem(d, sp.know_keys[i], v) == 0 && slots[i] == v;
        Py_XDECREF(v);
    }
    Py_ssize_t pos = 0, j = 0;
    PyObject *k, *v;
    while (ok && PyDict_Next(d, &pos, &k, &v)) {  // and iteration still in the fields' order
        ok = k == sp.know_keys[size_t(j)] && v == slots[j];
        ++j;
    }
    Py_DECREF(d);
    PyErr_Clear();
    return ok && j == Py_ssize_t(sp.know_keys.size());
#else
    (void)sp;
    return false;
#endif
}

namespace {

// The knowledge object (see read_knowledge_any). The usual line holds exactly the schema fields in the
// registry order: its dict is a copy of the spec's prototype (one copy of a ready table) with the
// values replaced, not built slot by slot; any other line is read again by the general reader.
PyObject* read_knowledge(const Spec& sp, Cur& c) {
    const size_t nf = sp.know_lits.size();
    const Cur start = c;
    if (nf > 0 && sp.know_proto != nullptr && c.ch('{')) {
        PyObject* d = PyDict_Copy(sp.know_proto);
        if (d == nullptr) return nullptr;
        PyObject** slots = split_values(sp, d);
        size_t i = 0;
        for (; i < nf; ++i) {
            uint64_t x;
            if ((i > 0 && !c.ch(',')) || !c.lit(sp.know_lits[i]) || !read_uint(c, kMaxIntDigits, x) ||
                x > uint64_t(sp.know_max))
                break;
            PyObject* v = PyLong_FromUnsignedLongLong(x);
            if (v != nullptr && slots != nullptr) {  // (the copy's own value slot of field i: see split_values)
                PyObject* old = slots[i];
                slots[i] = v;
                Py_XDECREF(old);
                continue;
            }
            if (v == nullptr || PyDict_SetItem(d, sp.know_keys[i], v) != 0) {
                Py_XDECREF(v);
                break;
            }
            Py_DECREF(v);
        }
        if (i == nf && c.ch('}') && PyDict_GET_SIZE(d) == Py_ssize_t(nf)) return d;
        Py_DECREF(d);
        PyErr_Clear();
        c = start;
    }
    return read_knowledge_any(sp, c);
}

// The "aoe" object: `perf_us` / `default_perf_us` null or a number in (0, perf_max], extra fields
// any value of the narrow form.
PyObject* read_aoe(const Spec& sp, Cur& c) {
    if (!c.ch('{')) return nullptr;
    PyObject* d = PyDict_New();
    if (d == nullptr) return nullptr;
    Py_ssize_t members = 0;
    bool ok = c.ch('}');
    while (!ok) {  // one member a turn; `ok` once the closing brace is read
        PyObject* key = nullptr;
        if (c.lit("\"perf_us\":", 10)) {
            key = sp.perf_key;
        } else if (c.lit("\"default_perf_us\":", 18)) {
            key = sp.default_key;
        }
        PyObject* v;
        if (key != nullptr) {
            Py_INCREF(key);
            if (c.lit("null", 4)) {
                Py_INCREF(Py_None);
                v = Py_None;
            } else {
                bool is_int;
                long long iv;
                double dv;
                if (!read_number(c, is_int, iv, dv) ||
                    !(is_int ? iv > 0 && double(iv) <= sp.perf_max : dv > 0 && dv <= sp.perf_max)) {
                    Py_DECREF(key);
                    break;
                }
                v = is_int ? PyLong_FromLongLong(iv) : PyFloat_FromDouble(dv);
            }
        } else {
            const char* s;
            size_t len;
            if (!read_str(c, s, len) || !c.ch(':')) break;
            key = PyUnicode_DecodeASCII(s, Py_ssize_t(len), nullptr);
            v = key != nullptr ? read_value(c, 1) : nullptr;
        }
        if (!put_item(d, key, v)) break;
        ++members;
        if (c.ch('}')) {
            ok = true;
        } else if (!c.ch(',')) {
            break;
        }
    }
    if (ok && PyDict_GET_SIZE(d) == members) return d;
    Py_DECREF(d);
    return nullptr;
}

}  // namespace

// The cached case (packed key, id, version, knowledge, aoe fields, line) as a tuple that Python's
// cyclic GC does not track; steals the six references (nullptr, and all released, if one is nullptr).
//
// Why untracked: CPython stops tracking a tuple of atomic values by itself, never one that holds a
// dict, so every case a process has looked up would stay on the collector's lists and be scanned at
// each full collection (the bank caches a case per id looked up: up to hundreds of thousands). A
// cycle cannot run through a case: its dicts are fresh from the line and read-only by contract
// (`Entry`), and nothing they hold can refer back. An untracked container is only ever a root for
// the collector, never freed by it, so this cannot free anything early; at worst a cycle a caller
// built through a cached dict against that contract would not be collected.
PyObject* make_case(PyObject* pk, PyObject* pid, PyObject* pv, PyObject* know, PyObject* aoe, PyObject* line) {
    PyObject* parts[6] = {pk, pid, pv, know, aoe, line};
    PyObject* out = nullptr;
    bool ok = true;
    for (PyObject* x : parts) ok = ok && x != nullptr;
    if (ok) out = PyTuple_New(6);
    if (out == nullptr) {
        for (PyObject* x : parts) Py_XDECREF(x);
        return nullptr;
    }
    for (int i = 0; i < 6; ++i) PyTuple_SET_ITEM(out, i, parts[i]);
    PyObject_GC_UnTrack(out);
    return out;
}

// The case of a line: (packed key, id, version, knowledge, aoe fields, line), or nullptr. `want_id`
// and `want_packed` (may be nullptr): the query's id and packed key, whose objects the case shares
// when they are equal to the line's (what a hit caches costs no copy of them).
PyObject* scan(const Spec& sp, PyObject* line, PyObject* want_id, PyObject* want_packed) {
    const char* b = PyBytes_AS_STRING(line);
    Cur c{b, b + PyBytes_GET_SIZE(line)};
    // a first lookup's line is rarely in the cache (one of a million, read at load): ask for all of
    // its cache lines at once, so their misses overlap instead of stalling the parse one by one
    for (const char* a = b + 64; a < c.end; a += 64) __builtin_prefetch(a);
    uint64_t id;
    long long version;
    if (!c.lit("{\"id\":", 6) || !read_uint(c, 10, id) || id > 0xFFFFFFFFull) return nullptr;
    if (!c.lit(sp.op_lit) || !c.lit(",\"version\":", 11) || !read_int(c, version)) return nullptr;
    if (!c.lit(",\"info_dict\":", 13)) return nullptr;
    Packed packed;
    if (!(sp.vector ? read_vector_key(sp, c, packed) : read_fixed_key(sp, c, packed))) return nullptr;
    if (!c.lit(",\"knowledge\":", 13)) return nullptr;
    PyObject* know = read_knowledge(sp, c);
    if (know == nullptr) return nullptr;
    PyObject* aoe = c.lit(",\"aoe\":", 7) ? read_aoe(sp, c) : nullptr;
    if (aoe == nullptr || !c.ch('}') || c.p != c.end) {
        Py_DECREF(know);
        Py_XDECREF(aoe);
        return nullptr;
    }
    PyObject* pk = nullptr;
    if (want_packed != nullptr && PyBytes_CheckExact(want_packed) && size_t(PyBytes_GET_SIZE(want_packed)) == packed.size() &&
        std::memcmp(PyBytes_AS_STRING(want_packed), packed.data(), packed.size()) == 0) {
        Py_INCREF(want_packed);
        pk = want_packed;
    } else {
        pk = packed.bytes();
    }
    PyObject* pid = nullptr;
    if (want_id != nullptr && PyLong_CheckExact(want_id)) {
        int overflow = 0;
        const long long w = PyLong_AsLongLongAndOverflow(want_id, &overflow);
        if (overflow == 0 && w == static_cast<long long>(id)) {
            Py_INCREF(want_id);
            pid = want_id;
        }
        PyErr_Clear();
    }
    if (pid == nullptr) pid = PyLong_FromUnsignedLongLong(id);
    Py_INCREF(line);
    return make_case(pk, pid, PyLong_FromLongLong(version), know, aoe, line);
}

}  // namespace aoebank
