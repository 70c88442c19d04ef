"""Loads the crate's three modules. maturin installs `my_arrays` (the README's `#[pymodule]`);
the same shared library also exports `PyInit_frames` (the README's second module) and
`PyInit_downstream_checks` (src/checks.rs), loaded here from that file under their own names, as
Python would load `frames.<ext>` or `downstream_checks.<ext>` if the library were copied so."""

import importlib.machinery
import importlib.util
import sys

import my_arrays


def _library() -> str:
    # maturin's layout: the package `my_arrays` re-exporting the extension `my_arrays.my_arrays`.
    ext = getattr(my_arrays, "my_arrays", my_arrays)
    return ext.__file__


def load(name: str):
    if name in sys.modules:
        return sys.modules[name]
    path = _library()
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[name] = module
    return module


load("frames")
load("downstream_checks")
load("images")
load("matrices")
