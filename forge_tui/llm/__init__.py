"""The LLM proposer's pieces: endpoint configuration, client, prompts, reply parsing."""
