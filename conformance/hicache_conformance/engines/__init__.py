"""Engine bindings the suite certifies besides SGLang's HiCache (``hicache check --engine``).

Each engine has its own modules here; nothing in them is imported unless that engine is
asked for, so the engine's library is needed only then.
"""
