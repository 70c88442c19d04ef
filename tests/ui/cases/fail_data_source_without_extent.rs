// Issue 41: storage vouches for the bytes an export may describe. `DataSource::extent` has no
// default (a wrong default would let a shape reach past the storage), so an impl without it does
// not compile.
use std::ffi::c_void;

use dlbind::prelude::*;

struct Store(Box<[u8]>);

unsafe impl dlbind::DataSource for Store {
    fn data_ptr(&self) -> *mut c_void {
        self.0.as_ptr() as *mut c_void
    }
    fn element_dtype(&self) -> Option<DLDataType> {
        None
    }
}

fn main() {}
