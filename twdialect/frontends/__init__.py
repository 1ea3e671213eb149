"""Frontends: programs written in other languages, translated into tw graphs.

Each frontend is a module of its own that imports its language's package only when used
(`twdialect.frontends.rasp`: tracr's RASP, the optional extra `tw-compiler[rasp]`).
"""
