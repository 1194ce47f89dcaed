"""Work over recorded sessions with a flow, walked as the proxy saw them (`walk`): the reports
(audit, replay, search), a flow's lifecycle (staging, promotion, versions, review, drift),
what is fitted on held-out sessions (calibration, the surprise gate, the arbiter), and the
evaluation of other rules from exploring flow logs."""
