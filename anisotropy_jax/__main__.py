"""`python -m anisotropy_jax COMMAND ...`: the same as the installed `anisotropy-jax`
(anisotropy_jax/commands.py)."""
from anisotropy_jax.commands import main

if __name__ == "__main__":
    main()
