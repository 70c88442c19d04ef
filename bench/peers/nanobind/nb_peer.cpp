// nanobind peer for bench/bench_instructions.py: the same operations the dlbind demo rows measure.
//   nb_peer.from_dlpack(x): imports any DLPack producer through nanobind's `nb::ndarray<>` caster and
//     returns a view of it as an `nb::ndarray<nb::array_api>`: nanobind's own exported tensor object
//     (`nb_ndarray`, with `__dlpack__` / `__dlpack_device__`), the module's "own tensor". The view's
//     owner is a capsule holding the imported ndarray (nanobind's documented owner idiom), which keeps
//     the source alive. (Returning the imported ndarray itself would hand back the caller's object.)
//   nb_peer.ndim(x): the caster alone (import, return the rank).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

namespace nb = nanobind;
using In = nb::ndarray<>;
using Out = nb::ndarray<nb::array_api>;

NB_MODULE(nb_peer, m) {
    m.def("from_dlpack", [](In a) {
        In *keep = new In(a);
        nb::capsule owner(keep, [](void *p) noexcept { delete static_cast<In *>(p); });
        return Out(a.data(), a.ndim(), reinterpret_cast<const size_t *>(a.shape_ptr()), owner,
                   a.stride_ptr(), a.dtype(), a.device_type(), a.device_id());
    });
    m.def("ndim", [](In a) { return a.ndim(); });
}
