"""Dagster assets, one module per stage; thin wrappers over warehouse/ and stretto/."""

import warnings

import dagster as dg

# The partitioned graph uses parts of Dagster's API it marks beta (backfill policies, the
# multi-to-single partition mapping, observable source assets) or preview (a check per
# domain: `partitions_def` on an AssetCheckSpec): said once here, not to every user.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)
