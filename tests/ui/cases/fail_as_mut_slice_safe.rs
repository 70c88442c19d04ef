// Issue 33's audit: an imported tensor's elements are the producer's memory, which another import
// of the same object also reaches, so two safe `as_mut_slice` calls on two imports of one numpy
// array would give two `&mut` to the same bytes. Every accessor that hands out `&mut` is
// `unsafe`: called from safe code, none compiles.
use dlbind::ImportedTensor;

fn write_twice(a: &mut ImportedTensor, b: &mut ImportedTensor) {
    let x = a.as_mut_slice::<f64>().unwrap();
    let y = b.as_mut_slice::<f64>().unwrap();
    x[0] = y[0];
}

fn view_twice(a: &mut ImportedTensor) {
    let _ = a.as_ndarray_mut::<f64>();
    let _ = dlbind::adapters::ndarray::view_mut::<f64, ndarray::Ix1>(a);
}

fn main() {
    let _ = (write_twice, view_twice);
}
