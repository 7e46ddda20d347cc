"""Run tags opal_dp sets, so that the UI's run lists say what each run released (the command line sets them; a
run launched from the UI may set them too)."""

from opal_dp.release.period_input import WITHOUT_TAG

RELEASE_ID_TAG = "opal_dp/release_id"  # the release the run belongs to: the published release's id
WEEKS_TAG = "opal_dp/weeks"  # the weeks (Mondays) or service dates the run covers, comma-separated
UNIT_TAG = "opal_dp/privacy_unit"

__all__ = ["RELEASE_ID_TAG", "UNIT_TAG", "WEEKS_TAG", "WITHOUT_TAG"]
