"""The environment of the processes the tests start (scripts, commands, notebooks)."""


def one_device(env: dict) -> dict:
    """`env` (changed in place and returned) with one CPU device, as a user's machine: the
    suite's XLA_FLAGS (tests/conftest.py) without its fake device count, so that the process
    keeps the rest (the faster-compiling emitters)."""
    flags = [f for f in env.get("XLA_FLAGS", "").split()
             if not f.startswith("--xla_force_host_platform_device_count")]
    if flags:
        env["XLA_FLAGS"] = " ".join(flags)
    else:
        env.pop("XLA_FLAGS", None)
    return env
