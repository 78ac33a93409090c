"""``forge-tui optimize MODEL.py``: a campaign over a model's fusion regions.

The modules, in the order a campaign uses them: ``plan`` (capture the regions, pick the ones
worth a search, write their task files), ``budget`` (iterations and seconds per region in
proportion to share x distance to the roofline), ``scheduler`` (one search process per GPU at a
time, resumable after a kill), ``report`` (export the winners, run ``apply``, ``campaign.json``
and the summary table) and ``driver`` (one ``optimize`` invocation: a new campaign, or the one
this model already has). The campaign itself lives in the store (``store.campaigns``, schema 5).

No torch at import time: ``plan`` imports the capture (and torch) when it is called.
"""

from forge_tui.campaign.driver import Campaigner, Options
from forge_tui.campaign.scheduler import CampaignError

__all__ = ["CampaignError", "Campaigner", "Options"]
