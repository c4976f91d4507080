"""Resources: where the warehouse and the landing folder are, and how ingest reports progress."""

from pathlib import Path

import dagster as dg

from pipelines import settings
from pipelines.folders import landing_dir, warehouse_dir
from pipelines.warehouse.store import Warehouse


class WarehouseResource(dg.ConfigurableResource):
    """The warehouse the assets write and the landing folder the sensor watches.

    Defaults come from WIRESPEED_HOME and WIRESPEED_LANDING (else ./warehouse and ./landing,
    relative to the process that loads the code location).
    """

    root: str
    landing: str

    def open(self) -> Warehouse:
        warehouse = Warehouse(self.root)
        warehouse.ensure()
        return warehouse

    def settings(self) -> settings.Settings:
        return settings.load(Path(self.root))


class IngestProgress:
    """Told how many raw bytes ingestion has read; the CLI replaces it with a progress bar."""

    def advance(self, nbytes: int) -> None:
        """Record `nbytes` more bytes read."""


def default_warehouse() -> WarehouseResource:
    return WarehouseResource(root=str(warehouse_dir()), landing=str(landing_dir()))


@dg.definitions
def resources() -> dg.Definitions:
    return dg.Definitions(resources={"warehouse": default_warehouse(), "ingest_progress": IngestProgress()})
