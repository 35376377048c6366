"""The model families, one module each, ending with its `FAMILY` value (models/family.py); the
registry finds them by importing every module of this package. A family imports the building
blocks of `anisotropy_jax.models` and the file formats of `models/formats`, never another room
above it; a block never imports a family (.importlinter)."""
