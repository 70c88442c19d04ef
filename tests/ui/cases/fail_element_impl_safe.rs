// Issue 33: `DLPackElement` says how many bytes an element has, and the runtime sizes exports and
// imported slices by it, so a wrong answer would let a consumer read past the memory. It is an
// `unsafe trait`: a safe implementation (here a 1-byte type claiming float64) does not compile.
use dlbind::prelude::*;
use dlbind::spec::types::{DLDataType, DLDataTypeCode};

#[derive(Clone, Copy)]
struct Tiny(u8);

impl DLPackElement for Tiny {
    const DTYPE: DLDataType = DLDataType { code: DLDataTypeCode::kDLFloat.0, bits: 64, lanes: 1 };
    const NAME: &'static str = "float64";
}

fn main() {}
