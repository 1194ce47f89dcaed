"""Dagster assets, one module per stage; thin wrappers over warehouse/ and stretto/."""

import warnings

import dagster as dg

# The partitioned graph uses parts of Dagster's API it marks beta (backfill policies, the
# multi-to-single partition mapping, observable source assets): said once here, not per run.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
