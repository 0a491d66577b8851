"""Whole programs (tm.run, %%cuda, python -m tiledmm run): run (the caller's side), build (the
confined compile child: libclang finds the launches) and main (the confined process a
program runs in).
"""
