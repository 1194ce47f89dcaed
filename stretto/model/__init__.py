"""What the proxy serves: the flow file, the habit and reach models, bindings, the decision rule
and the flow's program."""
