"""The `promotion` asset: materialized for real, it writes the promoted flow and its report."""

from __future__ import annotations

from pathlib import Path

from stretto.model.flow import load_flow
from tests.conftest import REFERENCE_HOME


def test_the_promotion_asset_writes_the_flow_and_shows_the_report(
    tmp_path: Path, shop_flow_path: Path
) -> None:
    from assets.promote import promotion
    from pipeline.run import failure_message, materialize, output_metadata

    out = tmp_path / "shop.promoted.flow.json"
    config = {
        "flow": str(shop_flow_path),
        "shadow": str(REFERENCE_HOME / "shadow/shop"),
        "out": str(out),
    }
    result = materialize(
        [promotion], str(tmp_path / "home"), 10, {"promotion": config}, partition="shop"
    )
    assert result.success, failure_message(result)
    metadata = output_metadata(result, "promotion")
    assert metadata["promoted"] == 3 and metadata["sessions"] == 3
    assert metadata["decider"] == "reach"
    assert metadata["flow"] == str(out)
    assert "| find_user_id_by_email | 3 | 3 | 3 (100%) | 0.53 | 3 | yes |" in metadata["report"]
    rows = {r.data["site"]: r.data for r in metadata["sites"].records}
    assert rows["cancel_pending_order"]["promoted"] is False
    assert rows["get_user_details"]["used"] == 6
    assert load_flow(out)["promoted"]["sites"]["get_user_details"]["promoted"] is True
    assert "promoted" not in load_flow(shop_flow_path)  # the source flow is left alone

    strict = dict(config, min_tasks=4, out=str(tmp_path / "strict.flow.json"))
    result = materialize(
        [promotion], str(tmp_path / "home"), 10, {"promotion": strict}, partition="shop"
    )
    assert result.success and output_metadata(result, "promotion")["promoted"] == 0

    bad = dict(config, min_used=2.0)
    result = materialize(
        [promotion], str(tmp_path / "home"), 10, {"promotion": bad}, partition="shop"
    )
    assert not result.success
    assert "min_used wants a share in [0, 1], got 2.0" in failure_message(result)
