"""wirespeed's pipelines; `from pipelines import open_warehouse` gives a notebook the warehouse as polars frames."""


def __getattr__(name: str):
    # Imported on first use: the command line's other paths need neither polars nor this module.
    if name == "open_warehouse":
        from pipelines.notebook import open_warehouse

        return open_warehouse
    raise AttributeError(f"module 'pipelines' has no attribute {name!r}")
