"""The domain vocabulary shared by every layer: frozen types and str-enums.

Import the module, not the name: ``from gpuguard.model import fleet`` then ``fleet.Node``.
Nothing here does I/O or reads a clock.
"""
