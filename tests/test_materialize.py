"""The CLI's and the batches' runner: a run whose stage raises fails alone, in or out of the pool."""

from __future__ import annotations

import shutil

from conftest import TRACES
from pipelines.materialize import SMALL_RUN_BYTES, Directly
from pipelines.warehouse import Warehouse


class Unheard:
    def advance(self, nbytes: int) -> None:
        pass


def test_a_run_whose_stage_raises_fails_alone(tmp_path):
    """`gone` and `gone-too` name no landing folder (one large, in this process; one small, in the
    pool), so their parse stages raise; `kept` is ingested all the same."""
    landing = tmp_path / "landing"
    (landing / "kept").mkdir(parents=True)
    shutil.copy(TRACES / "hta_ddp_nccl_meta_2024" / "nccl_data.json.gz", landing / "kept")
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    runner = Directly(store, {"kept": 10 << 20, "gone": SMALL_RUN_BYTES + 1, "gone-too": 1}, landing)
    outcomes = {name: runner.run(name, Unheard()) for name in ("kept", "gone", "gone-too")}
    runner.finish(outcomes)
    assert outcomes["kept"].error is None and store.report_path("kept").exists()
    for name in ("gone", "gone-too"):
        assert "FileNotFoundError" in outcomes[name].error and str(landing / name) in outcomes[name].error
