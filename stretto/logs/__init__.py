"""Session logs in: reading logs, episodes, LLM turns, abstract steps, tool lists, and τ²-bench
import."""
