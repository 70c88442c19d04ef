// Issue 33: `dlbind::tuning` has three knobs (`enable_freelist`, `set_pool_limit`,
// `set_same_type_views`); what `#[derive(FromDLPack)]` generates with (building instances from
// the free list, the direct release) is not public, and the `pool_limit` getter is gone
// (`set_pool_limit` returns the previous limit).
use dlbind::prelude::*;

fn main() {
    Python::attach(|py| {
        let _ = dlbind::tuning::new_instance;
        let _ = dlbind::tuning::enable_direct_release::<()>(py);
        let _ = dlbind::tuning::pool_limit();
        let _ = dlbind::tuning::MAX_FREELIST_CAPACITY;
        let _: usize = dlbind::tuning::set_pool_limit(1 << 20);
    });
}
