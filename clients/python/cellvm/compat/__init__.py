"""Interfaces of other sandboxes, on cellvm: a program written for one runs
with only its import changed.

- :mod:`cellvm.compat.boxlite`: BoxLite's ``CodeBox`` (asyncio).
- :mod:`cellvm.compat.withruntime`: a Runtime-style ``Sandbox`` with an
  ``interpreter`` whose results are plain dicts, images given by ref.
"""
