// Issue 50: `DimsField` is sealed. A safe impl with `IN_PLACE = true` and an empty
// `write_in_place` would leave a field uninitialised that the derived import assumes written.
use dlbind::__private::derived::DimsField;

#[derive(Clone)]
struct MyDims(Vec<i64>);

impl DimsField for MyDims {
    fn from_dims(_: &[i64]) -> Option<Self> {
        None
    }
    const IN_PLACE: bool = true;
    unsafe fn write_in_place(_: *mut Self, _: &[i64]) {}
    fn owns_nothing(&self) -> bool {
        true
    }
}

fn main() {}
