"""AgentLab: run tool-using LLM agents as server-side turns and measure them."""
