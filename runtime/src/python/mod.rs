//! PyO3 glue: the `__dlpack__` / `__dlpack_device__` bodies the derive calls, and
//! `from_dlpack` (the consumer).
//!
//! Hot paths use the raw C API: exact-type checks (`PyLong_CheckExact`, `PyTuple_CheckExact`),
//! no dict, no exception-raising attribute probes (`_PyType_Lookup` on the type), vectorcall with
//! interned keyword names (from the generated `protocol` module) and a cached `max_version`
//! tuple (from the generated version constants).
//!
//! | module | holds |
//! |---|---|
//! | `access` | [`SourceAccess`]: `&T` from a frozen or non-frozen pyclass, and the owner an export keeps |
//! | `borrow` | the borrow guard a non-frozen pyclass's exports keep ([`live_export_borrows`]) |
//! | `args` | argument parsing for `__dlpack__` and `from_dlpack` |
//! | `names` | interned names and the `max_version` tuple |
//! | `producer` | `__dlpack__` / `__dlpack_device__` bodies and the fastcall `__dlpack__` |
//! | `consumer` | [`from_dlpack`] to an [`ImportedTensor`](crate::import::ImportedTensor) |
//! | `typed_import` | [`from_dlpack_fastcall`]: `from_dlpack` building the caller's type |
//! | `boundary` | C entry points: errors restored, panics stopped; method installation |

mod access;
mod args;
mod borrow;
mod boundary;
mod consumer;
mod names;
mod producer;
mod typed_import;

pub use access::SourceAccess;
pub use args::{parse_copy_arg, parse_device_arg, parse_export_request};
pub use borrow::live_export_borrows;
pub(crate) use borrow::{Window, hold as hold_borrow};
pub(crate) use boundary::{at_c_boundary, this_thread_holds_gil};
pub(crate) use consumer::getattr_optional;
pub use consumer::{from_dlpack, from_dlpack_py};
pub use producer::{
    dlpack_descriptor, dlpack_device_method, dlpack_fastcall, dlpack_method, install_fast_dlpack,
};
pub use typed_import::{
    FROM_DLPACK_NAME, add_from_dlpack_function, from_dlpack_fastcall,
    install_from_dlpack_staticmethod,
};
