//! `dlbind::cpython::freelist`: at most `MAX_TYPES` types get a list (its own test binary, so the
//! process-wide registry starts empty).

use dlbind::cpython::freelist::{MAX_TYPES, enable_freelist, freelist_len};
use pyo3::prelude::*;

macro_rules! many_classes {
    ($($name:ident),*) => {$(
        #[pyclass(frozen)]
        struct $name;
    )*};
}
many_classes!(C1, C2, C3, C4, C5, C6, C7, C8, C9);

#[test]
fn at_most_max_types_get_a_list() {
    Python::attach(|py| {
        let results = [
            enable_freelist::<C1>(py, 1),
            enable_freelist::<C2>(py, 1),
            enable_freelist::<C3>(py, 1),
            enable_freelist::<C4>(py, 1),
            enable_freelist::<C5>(py, 1),
            enable_freelist::<C6>(py, 1),
            enable_freelist::<C7>(py, 1),
            enable_freelist::<C8>(py, 1),
        ];
        assert_eq!(MAX_TYPES, 8);
        assert!(
            results.iter().all(Result::is_ok),
            "the first {MAX_TYPES} types get a list"
        );
        assert_eq!(freelist_len::<C8>(py), Some(0));
        let err = enable_freelist::<C9>(py, 1).unwrap_err();
        assert!(err.to_string().contains("maximum number of types"), "{err}");
        assert_eq!(freelist_len::<C9>(py), None);
        // Changing the capacity of a type that has a list still works; the refused type works
        // without one.
        enable_freelist::<C1>(py, 2).unwrap();
        drop(Bound::new(py, C9).unwrap());
        drop(Bound::new(py, C1).unwrap());
        assert_eq!(freelist_len::<C1>(py), Some(1));
    });
}
