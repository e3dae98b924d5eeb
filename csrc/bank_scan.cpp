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
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sys/stat.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

constexpr int kMaxDepth = 32;          // nesting accepted in extra fields (orjson's own limit is far above)
constexpr int kMaxIntDigits = 18;      // larger integers: the Python path (orjson turns > 64-bit ones into floats)
constexpr size_t kMaxFloatChars = 40;  // longer number tokens: the Python path
constexpr Py_ssize_t kAttrsCacheMax = 65536;

// What the bank checks a line of one operator file against (built once per file by `bank_spec`).
struct Spec {
    std::string op_lit;                    // `,"op":"<op type>"` (the "op" member must name the file's op)
    bool vector = false;                   // vector packing, else fixed int64 key fields
    std::vector<std::string> key_lits;     // fixed families: `"name":` (`,"name":` after the first), in order
    std::vector<PyObject*> key_names;      // the key fields as interned str (fixed: the schema's; vector: its 7)
    std::vector<std::string> know_lits;    // `"name":` of each knowledge field every record must hold
    std::vector<PyObject*> know_keys;      // ... the names as interned str (the cached dict's keys)
    long long know_max = 0;                // largest knowledge value allowed
    double perf_max = 0;                   // largest stored time allowed (µs)
    PyObject* perf_key = nullptr;          // "perf_us", "default_perf_us" (interned)
    PyObject* default_key = nullptr;
    PyObject* attrs_cache = nullptr;       // dict: attrs JSON text -> its packed canonical bytes
    PyObject* attrs_fn = nullptr;          // attrs dict -> packed canonical bytes (the Python packer)
    PyObject* unparsed = nullptr;          // a filed line's record before it is parsed (jsonl.UNPARSED)

    ~Spec() {
        for (PyObject* k : know_keys) Py_XDECREF(k);
        for (PyObject* k : key_names) Py_XDECREF(k);
        Py_XDECREF(perf_key);
        Py_XDECREF(default_key);
        Py_XDECREF(attrs_cache);
        Py_XDECREF(attrs_fn);
        Py_XDECREF(unparsed);
    }
};

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
    char buf[kMaxFloatChars + 1];
    std::memcpy(buf, s, n);
    buf[n] = 0;
    char* stop = nullptr;
    double d = PyOS_string_to_double(buf, &stop, nullptr);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return false;
    }
    // orjson refuses an infinite value; an underflow to zero is left to the Python path too
    if (stop != buf + n || !std::isfinite(d) || d == 0.0) return false;
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

// The packed key being built: bytes kept inline (a key is a few hundred bytes), on the heap beyond.
class Packed {
public:
    void put(const char* s, size_t n) {
        if (n_ + n > cap_) grow(n_ + n);
        std::memcpy(p_ + n_, s, n);
        n_ += n;
    }
    void u32(uint32_t v) { put(le<4>(v).b, 4); }
    void i64(uint64_t v) { put(le<8>(v).b, 8); }
    void set_u32(size_t at, uint32_t v) { std::memcpy(p_ + at, le<4>(v).b, 4); }
    size_t size() const { return n_; }
    const char* data() const { return p_; }
    void clear() { n_ = 0; }
    PyObject* bytes() const { return PyBytes_FromStringAndSize(p_, Py_ssize_t(n_)); }

private:
    template <int N>
    struct Le {
        char b[N];
    };
    template <int N>
    static Le<N> le(uint64_t v) {  // little-endian whatever the host (one store where it is)
        Le<N> o;
        for (int i = 0; i < N; ++i) o.b[i] = char((v >> (8 * i)) & 0xff);
        return o;
    }
    void grow(size_t need) {
        size_t cap = cap_ * 2 > need ? cap_ * 2 : need;
        std::unique_ptr<char[]> h(new char[cap]);
        std::memcpy(h.get(), p_, n_);
        heap_ = std::move(h);
        p_ = heap_.get();
        cap_ = cap;
    }
    char inline_[1024];
    char* p_ = inline_;
    size_t n_ = 0, cap_ = sizeof(inline_);
    std::unique_ptr<char[]> heap_;
};

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

// The packed canonical attrs (u32 length + canonical JSON) of the attrs object at `c`: looked up
// by its text in the cache, else computed by the Python packer from the object read here.
bool read_attrs(const Spec& sp, Cur& c, Packed& out) {
    if (c.lit("{}", 2)) {
        out.u32(2);
        out.put("{}", 2);
        return true;
    }
    const char* s = c.p;
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

// The knowledge object: every schema field an integer in [0, know_max] (in any order, once), extra
// fields any value of the narrow form. Fields in the registry order are matched by their literal.
PyObject* read_knowledge(const Spec& sp, Cur& c) {
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
            if (f == nf) {  // an extra field
                PyObject* k = PyUnicode_DecodeASCII(s, Py_ssize_t(len), nullptr);
                if (!put_item(d, k, k != nullptr ? read_value(c, 1) : nullptr)) break;
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
PyObject* scan(const Spec& sp, PyObject* line, PyObject* want_id = nullptr, PyObject* want_packed = nullptr) {
    const char* b = PyBytes_AS_STRING(line);
    Cur c{b, b + PyBytes_GET_SIZE(line)};
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
    return n == PyUnicode_GET_LENGTH(name) && std::memcmp(PyUnicode_DATA(k), PyUnicode_DATA(name), size_t(n)) == 0;
}

// One int64 of a query key: an exact int (or bool, which struct packs as 0/1) within int64.
bool key_int(PyObject* v, long long& x) {
    if (!PyLong_CheckExact(v) && !PyBool_Check(v)) return false;
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
    PyObject* attrs = PyObject_CallOneArg(sp.attrs_fn, v[6]);
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

// Calls `lock.acquire()` or `lock.release()` (a threading.Lock: the bank's mutex).
bool call_lock(PyObject* lock, const char* verb) {
    PyObject* r = PyObject_CallMethod(lock, verb, nullptr);
    Py_XDECREF(r);
    return r != nullptr;
}

// `OpFile.resolve_fast` (see there), natively: under the bank's lock, the one line filed under `h`,
// if it is still that and unparsed, checked and cached by `scan` and indexed with the same stores in
// the same order. `state` = (pending, index, recs, bulk): the OpFile's containers (`OpFile.fast`).
// 1: indexed (*out: its case); 0: the line is not the usual case; 2: not tried (the state is not
// the usual one: a line appended since the load, say); -1: an error is set. Nothing changed but on 1.
int resolve_first(const Spec& sp, PyObject* state, PyObject* lock, PyObject* hits, PyObject* h, PyObject* packed,
                  PyObject** out) {
    PyObject *pending = PyTuple_GET_ITEM(state, 0), *index = PyTuple_GET_ITEM(state, 1);
    PyObject *recs = PyTuple_GET_ITEM(state, 2), *bulk = PyTuple_GET_ITEM(state, 3);
    if (!PyDict_CheckExact(pending) || !PyDict_CheckExact(index) || !PyList_CheckExact(recs) || !PyTuple_CheckExact(bulk))
        return 2;
    if (!call_lock(lock, "acquire")) return -1;
    int rc = 2;
    PyObject* c = nullptr;
    PyObject* i = PyDict_GetItemWithError(pending, h);  // borrowed (the lock keeps it alive)
    Py_ssize_t at = i != nullptr && PyLong_CheckExact(i) ? PyLong_AsSsize_t(i) : -1;
    if (at >= 0 && at < PyTuple_GET_SIZE(bulk) && at < PyList_GET_SIZE(recs) &&
        PyList_GET_ITEM(recs, at) == sp.unparsed && PyDict_Contains(hits, h) == 0 &&
        PyBytes_CheckExact(PyTuple_GET_ITEM(bulk, at))) {
        rc = 0;
        c = scan(sp, PyTuple_GET_ITEM(bulk, at), h, packed);
        if (c == nullptr) PyErr_Clear();  // not the usual case: the Python path resolves it
    }
    if (c != nullptr && PyObject_RichCompareBool(PyTuple_GET_ITEM(c, 1), h, Py_EQ) == 1) {
        // `_index_line`'s stores for the first line of a new case, in its order: the hit before the
        // pending entry goes (a reader that sees neither would miss the case)
        PyObject* k = PyTuple_Pack(2, h, PyTuple_GET_ITEM(c, 0));
        Py_INCREF(i);
        rc = k != nullptr && PyList_SetItem(recs, at, (Py_XINCREF(k), k)) == 0 && PyDict_SetItem(index, k, i) == 0 &&
                     PyDict_SetItem(hits, h, c) == 0 && PyDict_DelItem(pending, h) == 0
                 ? 1
                 : -1;
        Py_DECREF(i);
        Py_XDECREF(k);
    }
    if (rc == 1) {
        *out = c;
    } else {
        Py_XDECREF(c);
    }
    if (rc != 1 && PyErr_Occurred()) rc = -1;
    if (!call_lock(lock, "release")) rc = -1;
    return rc;
}

// bank_probe(spec, fd, signature, key, hash_fn, hits, state, lock) -> the cached case of the key; or
// (id, packed key) when the id holds no case with that key; or (id, packed key, False) when its
// filed line is not the usual case (the Python path resolves it); or None when the Python path must
// answer (fstat shows a changed file, or the key is not an exact dict of plain values). fd -1: the
// file is not re-validated (package data); state None: no first lookup here. The body of
// `OpBank.lookup` for the usual call, in one native call; hash_fn's exceptions propagate.
PyObject* bank_probe(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 8 || !PyCapsule_CheckExact(args[0]) || !PyLong_CheckExact(args[1]) || !PyDict_CheckExact(args[5]) ||
        !(args[6] == Py_None || (PyTuple_CheckExact(args[6]) && PyTuple_GET_SIZE(args[6]) == 4))) {
        PyErr_SetString(PyExc_TypeError, "bank_probe(spec, fd, signature, key, hash_fn, hits, state, lock)");
        return nullptr;
    }
    auto* sp = static_cast<Spec*>(PyCapsule_GetPointer(args[0], kCapsule));
    if (sp == nullptr) return nullptr;
    const long fd = PyLong_AsLong(args[1]);
    if (fd == -1 && PyErr_Occurred()) return nullptr;
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
    if (v == nullptr && !PyErr_Occurred() && args[6] != Py_None &&
        PyDict_Contains(PyTuple_GET_ITEM(args[6], 0), h) == 1) {
        first = resolve_first(*sp, args[6], args[7], args[5], h, packed, &c);  // (c: a new reference)
        v = c;
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
            Py_INCREF(v);
            Py_XDECREF(c);
            return v;
        }
    }
    Py_XDECREF(c);
    const bool declined = v == nullptr && args[6] != Py_None && first == 0 &&
                          PyDict_Contains(PyTuple_GET_ITEM(args[6], 0), h) == 1;
    PyObject* r = declined ? PyTuple_Pack(3, h, packed, Py_False) : PyTuple_Pack(2, h, packed);
    Py_DECREF(packed);
    Py_DECREF(h);
    return r;
}

PyMethodDef kProbeDef = {
    "bank_probe", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(bank_probe)), METH_FASTCALL,
    "bank_probe(spec, fd, signature, key, hash_fn, hits, state, lock) -> the cached case (found, or "
    "cached now by a first lookup), (id, packed key[, False]) to look further, or None (the Python path "
    "answers)."};

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
                     py::dict attrs_cache, py::object attrs_fn, py::object unparsed) {
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
    sp->know_max = know_max;
    sp->perf_max = perf_max;
    sp->perf_key = interned("perf_us");
    sp->default_key = interned("default_perf_us");
    sp->attrs_cache = attrs_cache.release().ptr();
    sp->attrs_fn = attrs_fn.release().ptr();
    sp->unparsed = unparsed.release().ptr();
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

// Called from the module definition (bindings.cpp): adds `bank_spec`, `bank_scan`, `bank_case`, `bank_pack`, `bank_unchanged`, `bank_probe`.
void register_bank_scan(py::module_& m) {
    m.def("bank_spec", &bank_spec, py::arg("op"), py::arg("vector"), py::arg("key_fields"),
          py::arg("knowledge_fields"), py::arg("know_max"), py::arg("perf_max"), py::arg("attrs_cache"),
          py::arg("attrs_fn"), py::arg("unparsed"),
          "What `bank_scan` checks the lines of one operator file against (an opaque capsule).");
    add_function(m, &kScanDef);
    add_function(m, &kCaseDef);
    add_function(m, &kPackDef);
    add_function(m, &kUnchangedDef);
    add_function(m, &kProbeDef);
}
