"""Outside the wall: the host mechanisms the Linux drivers share.

Cgroups, the metadata guard, file watches, session namespaces, published
ports, the bwrap binary and the Landlock backend's rule planning all run
in stockade's own process with the person's privileges, never inside a
sandbox, so they may import the stockade package freely; nothing here
may be imported by the init, which must stay standard-library only.
"""
