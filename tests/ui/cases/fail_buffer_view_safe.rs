// Issue 41: a view of memory some other object owns states its extent, and only an `unsafe`
// caller can vouch for it.
use dlbind::prelude::*;

fn view(owner: Py<PyAny>, data: *mut std::ffi::c_void) -> Buffer {
    Buffer::view(owner, data, dlbind::Extent::from_start(16), Device::CPU, false)
}

fn main() {}
