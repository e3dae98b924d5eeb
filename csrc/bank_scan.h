// Shared by the operator bank's native code (bank_scan.cpp: the record-line recogniser; bank_lookup.cpp:
// query packing, the lookup's native call, the Python entry points): what a file's lines are checked
// against, the packed-key buffer, and the one-pass check of a line.
#pragma once

#include <Python.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace aoebank {

constexpr Py_ssize_t kAttrsCacheMax = 65536;  // packed attrs cached (then the cache starts again)

// What the bank checks a line of one operator file against (built once per file by `bank_spec`).
struct Spec {
    std::string op_lit;                    // `,"op":"<op type>"` (the "op" member must name the file's op)
    bool vector = false;                   // vector packing, else fixed int64 key fields
    std::vector<std::string> key_lits;     // fixed families: `"name":` (`,"name":` after the first), in order
    std::vector<PyObject*> key_names;      // the key fields as interned str (fixed: the schema's; vector: its 7)
    std::vector<std::string> know_lits;    // `"name":` of each knowledge field every record must hold
    std::vector<PyObject*> know_keys;      // ... the names as interned str (the cached dict's keys)
    PyObject* know_proto = nullptr;        // dict: every knowledge field (registry order) -> None, copied
                                           // for a line holding exactly those in that order
    bool know_split = false;               // its copies' value slots are written directly (split_values)
    long long know_max = 0;                // largest knowledge value allowed
    std::vector<std::string> impl_names;   // the values an extra `"impl"` member may hold (any other extra
                                           // member: the line takes the Python path, which decides it)
    double perf_max = 0;                   // largest stored time allowed (µs)
    PyObject* perf_key = nullptr;          // "perf_us", "default_perf_us" (interned)
    PyObject* default_key = nullptr;
    PyObject* attrs_cache = nullptr;       // dict: attrs JSON text -> its packed canonical bytes
    PyObject* attrs_fn = nullptr;          // attrs dict -> packed canonical bytes (the Python packer)
    PyObject* unparsed = nullptr;          // a filed line's record before it is parsed (jsonl.UNPARSED)
    PyObject* entry_type = nullptr;        // opfile.Entry (nullptr: a lookup answers with the case tuple)
    PyObject* entry_op = nullptr;          // ... and what an Entry of this file holds in its slots `op`
    PyObject* entry_source = nullptr;      // and `source`, at these offsets (its member descriptors')
    Py_ssize_t op_off = 0, source_off = 0, case_off = 0;

    ~Spec() {
        for (PyObject* k : know_keys) Py_XDECREF(k);
        for (PyObject* k : key_names) Py_XDECREF(k);
        Py_XDECREF(know_proto);
        Py_XDECREF(perf_key);
        Py_XDECREF(default_key);
        Py_XDECREF(attrs_cache);
        Py_XDECREF(attrs_fn);
        Py_XDECREF(unparsed);
        Py_XDECREF(entry_type);
        Py_XDECREF(entry_op);
        Py_XDECREF(entry_source);
    }
};

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

// The case of one of aoe's own lines, checked in one pass (see bank_scan.cpp): (packed key, id,
// version, knowledge, aoe fields, line), untracked by the cyclic GC; nullptr (an error may be set)
// when the line is not the usual case. want_id / want_packed: the query's, shared when equal.
PyObject* scan(const Spec& sp, PyObject* line, PyObject* want_id = nullptr, PyObject* want_packed = nullptr);

// Whether a copy of sp.know_proto may be filled through its value slots (see bank_scan.cpp).
bool check_split_values(const Spec& sp);

// The cached-case tuple of these six (references stolen), untracked by the cyclic GC.
PyObject* make_case(PyObject* pk, PyObject* pid, PyObject* pv, PyObject* know, PyObject* aoe, PyObject* line);

}  // namespace aoebank
