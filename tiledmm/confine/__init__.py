"""Confinement: every process that compiles or runs student code is confined (sandbox:
Landlock, seccomp, rlimits), and the caller treats whatever such a process hands back as
hostile (isolation: the worker client, its message protocol and the shared argument memory).
"""
