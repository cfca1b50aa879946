"""Inside the wall: stockade-init, which runs in the sandbox before any layer is in place.

These modules import only the standard library and each other (as
top-level siblings when init.py runs them as a script), because whatever
they import runs unconfined in every command's sandbox and is paid for
on every command; `layers.INIT_MODULES` lists them, and this directory
alone is what the sandbox is shown of stockade. The host imports their
constants and pure builders through this package.
"""
