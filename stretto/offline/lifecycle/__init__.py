"""A flow's life after learning: staging, promotion, versions, review (flow-show, flow-diff), and
drift with its change points."""
