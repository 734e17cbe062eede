"""fa: generate, run, verify and compare FlashAttention homework programs."""


def __getattr__(name: str):
    """__version__, read from the installed package's metadata when first asked (importlib.metadata
    costs a tenth of a second at every start of fa otherwise)."""
    if name != "__version__":
        raise AttributeError(name)
    from importlib import metadata
    try:
        version = metadata.version("fa-toolkit")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        version = "unknown (not installed)"
    globals()["__version__"] = version
    return version
